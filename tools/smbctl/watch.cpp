// smbctl status --watch and smbctl top: the fabric, refreshed every
// --interval seconds until stopped (or --iterations times). On a terminal
// each refresh replaces the last, as top(1) does; piped, the refreshes
// follow each other (with --json: one JSON document per line). Each
// refresh asks with a fresh client, so a server that went away and came
// back is seen again.
#include "commands.hpp"
#include "table.hpp"

#include <util/parse.hpp>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

namespace smb::smbctl {
namespace {

using Clock = std::chrono::steady_clock;

// Calls frame(out) every `every`; a terminal shows only the latest frame.
void refresh(std::chrono::milliseconds every, std::optional<unsigned> iterations,
             const std::function<void(std::ostream&)>& frame) {
  const bool terminal = ::isatty(STDOUT_FILENO) == 1;
  auto next = Clock::now();
  for (unsigned i = 0; !iterations || i < *iterations; ++i) {
    if (i > 0) std::this_thread::sleep_until(next);
    next += every;
    std::ostringstream out;
    frame(out);
    if (terminal) std::cout << "\x1b[H\x1b[2J";  // home, clear: the frame replaces the last
    std::cout << out.str() << std::flush;
  }
}

std::string now_text() {
  const auto t = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%H:%M:%S", std::localtime(&t));
  return text;
}

std::string rate_text(double per_second, bool bytes) {
  if (bytes) return util::format_bytes(static_cast<std::uint64_t>(per_second)) + "/s";
  std::ostringstream out;
  out.precision(per_second < 10 ? 2 : 0);
  out << std::fixed << per_second;
  return out.str();
}

struct Seen {
  ServerActivity activity;
  Clock::time_point at;
  std::uint64_t instance = 0;
};

struct Rates {
  double requests = 0, errors = 0, vector_ops = 0, vector_bytes = 0, written = 0, read = 0;
};

// Per second since the last look at the same run of the server; none on the
// first look or after a restart (its totals began again).
std::optional<Rates> rates(const ServerStatus& s, Clock::time_point at, std::map<std::string, Seen>& seen) {
  std::optional<Rates> out;
  const auto last = seen.find(s.address);
  if (last != seen.end() && last->second.instance == s.instance) {
    const double dt = std::chrono::duration<double>(at - last->second.at).count();
    const auto& a = s.activity;
    const auto& b = last->second.activity;
    const auto per_s = [dt](std::uint64_t now, std::uint64_t before) {
      return now >= before && dt > 0 ? static_cast<double>(now - before) / dt : 0.0;
    };
    out = Rates{per_s(a.requests, b.requests),         per_s(a.errors, b.errors),
                per_s(a.vector_ops, b.vector_ops),     per_s(a.vector_bytes, b.vector_bytes),
                per_s(a.transport_bytes_written, b.transport_bytes_written),
                per_s(a.transport_bytes_read, b.transport_bytes_read)};
  }
  seen[s.address] = Seen{s.activity, at, s.instance};
  return out;
}

void top_frame(const ClientOptions& options, bool json, std::chrono::milliseconds every,
               std::map<std::string, Seen>& seen, std::ostream& out) {
  Client client(options);
  const auto servers = client.status();
  const auto at = Clock::now();
  if (json) {
    auto list = nlohmann::json::array();
    for (const auto& s : servers) {
      nlohmann::json entry = {{"address", s.address}, {"reachable", s.reachable}};
      if (!s.reachable) {
        entry["error"] = s.error;
      } else {
        entry.update({{"clients", s.clients}, {"capacity", s.capacity}, {"used", s.used},
                      {"buffers", s.buffers.size()}, {"requests", s.activity.requests}});
        if (const auto r = rates(s, at, seen))
          entry.update({{"requests_per_s", r->requests}, {"errors_per_s", r->errors},
                        {"vector_ops_per_s", r->vector_ops}, {"vector_bytes_per_s", r->vector_bytes},
                        {"transport_write_bytes_per_s", r->written}, {"transport_read_bytes_per_s", r->read}});
      }
      list.push_back(std::move(entry));
    }
    out << nlohmann::json{{"time", std::time(nullptr)}, {"servers", std::move(list)}}.dump() << '\n';
    return;
  }
  out << "smbctl top - " << now_text() << ", every " << rate_text(std::chrono::duration<double>(every).count(), false) << " s, "
      << servers.size() << " server(s)\n\n";
  Table table({"SERVER", "CLIENTS", "REQ/S", "ERR/S", "VOPS/S", "VECTOR", "AM WRITE", "AM READ", "USED", "BUFFERS"});
  for (std::size_t c = 1; c < 10; ++c) table.align_right(c);
  for (const auto& s : servers) {
    if (!s.reachable) {
      table.add_row({s.address, "UNREACHABLE", "-", "-", "-", "-", "-", "-", "-", "-"});
      continue;
    }
    const auto r = rates(s, at, seen);
    const auto cell = [&](double Rates::*field, bool bytes) { return r ? rate_text((*r).*field, bytes) : "-"; };
    table.add_row({s.address, std::to_string(s.clients), cell(&Rates::requests, false), cell(&Rates::errors, false),
                   cell(&Rates::vector_ops, false), cell(&Rates::vector_bytes, true), cell(&Rates::written, true),
                   cell(&Rates::read, true), bytes_with_percent(s.used, s.capacity),
                   std::to_string(s.buffers.size())});
  }
  table.print(out);
  out << "\nVECTOR: bytes of buffer covered by vector ops; AM: bytes through the server's CPU (one-sided RMA is "
         "not seen by servers)\n";
}

}  // namespace

void watch_status(const ClientOptions& options, bool json, std::chrono::milliseconds every,
                  std::optional<unsigned> iterations) {
  refresh(every, iterations, [&](std::ostream& out) {
    Client client(options);
    std::ostringstream frame;
    show_status(client, json, frame, /*compact=*/true);
    if (!json) out << "smbctl status - " << now_text() << "\n\n";
    out << frame.str();
    if (!json && !::isatty(STDOUT_FILENO)) out << '\n';
  });
}

void show_top(const ClientOptions& options, bool json, std::chrono::milliseconds every,
              std::optional<unsigned> iterations) {
  std::map<std::string, Seen> seen;
  refresh(every, iterations, [&](std::ostream& out) { top_frame(options, json, every, seen, out); });
}

}  // namespace smb::smbctl
