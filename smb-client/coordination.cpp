// Barriers and buffer versions from the client's side (locks:
// keeper_lock.cpp). Barriers, like locks and layout records, live on the
// keepers of their name (its home, then the next server), so every process
// finds them from the name alone; version reads and waits go to every
// server holding part of the buffer, as calls over the data path.
#include "client_core.hpp"
#include "server_calls.hpp"

#include "protocol/messages.hpp"
#include "util/parse.hpp"

#include <algorithm>

namespace smb {


namespace {
// A buffer's version is the least of its servers' (each counts its own ops).
std::uint64_t least_of(const std::vector<std::uint64_t>& versions) {
  return versions.empty() ? 0 : *std::min_element(versions.begin(), versions.end());
}
}  // namespace

// A call over a keeper's data channel (about one round trip once all
// arrive), naming this client's control session there, whose close breaks
// the barrier for the other parties. The home takes it; where the home
// cannot be reached, or is lost while the parties wait (each is then told
// at once), they all meet at the next keeper instead (docs/reliability.md,
// "Locks and barriers with two keepers").
void ClientCore::barrier(std::string_view name_view, std::uint32_t parties, std::chrono::milliseconds timeout) {
  const std::string name(name_view);
  protocol::validate_name(name);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const auto keepers = keepers_of(name);
  std::string lost;  // keepers lost on the way, and why
  for (std::size_t i = 0; i < keepers.size(); ++i) {
    const bool last = i + 1 == keepers.size();
    const auto fail = [&](const Error& e) {
      throw Error(e.code(), lost.empty() ? std::string(e.what()) : std::string(e.what()) + " (before it: " + lost + ")");
    };
    client::ServerLink* keeper = nullptr;
    try {
      keeper = &relink(keepers[i]);
    } catch (const Error& e) {
      if (last || !client::is_absence(e)) fail(e);
      lost += keepers[i] + " cannot be reached: " + e.what() + "; ";
      continue;
    }
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (wait.count() <= 0) fail(Error(Errc::timeout, "barrier " + util::quoted(name) + ": not all parties came in time"));
    try {
      client::ServerCalls calls(
          shared_from_this(), [name] { return "barrier " + smb::util::quoted(name); }, wait);
      calls.add_barrier_call(*keeper, name, parties, wait, keeper->control->session());
      calls.finish_versions();
      return;
    } catch (const Error& e) {
      // server_gone from a keeper still there: a party left, which breaks it.
      if (last || e.code() != Errc::server_gone || keeper->alive()) fail(e);
      lost += keepers[i] + " was lost while the parties waited: " + e.what() + "; ";
    }
  }
}

std::uint64_t BufferCore::version() { return least_of(server_versions()); }

std::vector<std::uint64_t> BufferCore::server_versions() {
  client::ServerCalls calls(client_, [name = name_] { return "buffer '" + *name + "': version"; });
  for (std::uint32_t p = 0; p < server_count(); ++p)
    if (layout_.shares[p] != 0) {  // a server busy with an op answers when it ends, within the client's timeout
      const auto r = path_->version_copy(p, "version");
      calls.add_version_call(*link_at(replica_server(p, r)), protocol::VersionCallKind::get, segment_names_[r], 0,
                             client_->timeout());
    }
  return calls.finish_versions();
}

// Every server waits on its own part at once; the least version reached is the buffer's.
std::uint64_t BufferCore::wait_version(std::uint64_t version, std::chrono::milliseconds timeout) {
  client::ServerCalls calls(
      client_, [name = name_, version] { return "buffer '" + *name + "': wait for version " + std::to_string(version); },
      timeout);
  for (std::uint32_t p = 0; p < server_count(); ++p)
    if (layout_.shares[p] != 0) {
      const auto r = path_->version_copy(p, "wait for version");
      calls.add_version_call(*link_at(replica_server(p, r)), protocol::VersionCallKind::wait, segment_names_[r], version,
                             timeout);
    }
  return least_of(calls.finish_versions());
}

}  // namespace smb
