// Client::diagnose: each server's host checks (the diagnose message) and
// its clock against this host's, for smbctl doctor.
#include "client_core.hpp"
#include "host/findings_codec.hpp"
#include "protocol/messages.hpp"

#include <chrono>

namespace smb::detail {

using protocol::Body;
using protocol::MessageType;

std::vector<ServerDiagnosis> ClientCore::diagnose() {
  std::vector<ServerDiagnosis> out;
  for (const auto& s : sorted_servers_) {
    ServerDiagnosis d;
    d.address = s;
    try {
      auto& control = *link(s).control;
      // The server reads its clock between these two readings of ours: its
      // offset is known to within half the round trip.
      const auto sent = std::chrono::system_clock::now();
      const auto reply = control.call(MessageType::diagnose, Body::object());
      const auto answered = std::chrono::system_clock::now();
      const auto what = "diagnose reply of server " + s;
      d.findings = host::findings_from_body(reply.value("checks", Body()), what.c_str());
      const auto server_clock = std::chrono::nanoseconds(static_cast<std::int64_t>(protocol::get_u64(reply, "clock_ns", what)));
      d.round_trip = answered - sent;
      const auto middle = sent.time_since_epoch() + d.round_trip / 2;
      d.clock_offset = server_clock - std::chrono::duration_cast<std::chrono::nanoseconds>(middle);
      d.clock_uncertainty = d.round_trip / 2;
    } catch (const Error& e) {
      if (!client::is_absence(e) && e.code() != Errc::protocol) throw;
      d.reachable = false;
      d.error = e.what();
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace smb::detail
