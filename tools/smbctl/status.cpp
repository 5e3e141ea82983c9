// smbctl status: capacity, use and buffers of every server.
#include "commands.hpp"
#include "table.hpp"

#include <util/parse.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <map>

namespace smb::smbctl {
namespace {

nlohmann::json to_json(const ServerStatus& s) {
  if (!s.reachable) return {{"address", s.address}, {"reachable", false}, {"error", s.error}};
  auto buffers = nlohmann::json::array();
  for (const auto& b : s.buffers)
    buffers.push_back({{"name", b.name}, {"bytes", b.bytes}, {"open_handles", b.open_handles}});
  nlohmann::json j{{"address", s.address},
          {"reachable", true},
          {"instance", s.instance},
          {"transport", s.transport},
          {"capacity", s.capacity},
          {"used", s.used},
          {"used_fraction", s.capacity ? static_cast<double>(s.used) / static_cast<double>(s.capacity) : 0.0},
          {"largest_free", s.largest_free},
          {"huge_pages", s.huge_pages},
          {"populated", s.populated},
          {"clients", s.clients},
          {"waiting",
           {{"versions", s.waiting.versions},
            {"barrier_parties", s.waiting.barrier_parties},
            {"locks", s.waiting.locks}}},
          {"buffers", std::move(buffers)}};
  if (!s.served_at.empty()) j["served_at"] = s.served_at;  // a replacement's (smbctl repair --onto)
  return j;
}

void print_human(const std::vector<ServerStatus>& servers, std::ostream& out) {
  Table table({"SERVER", "TRANSPORT", "CAPACITY", "USED", "LARGEST FREE", "HUGE PAGES", "CLIENTS",
               "BUFFERS"});
  for (std::size_t c : {2u, 3u, 4u, 6u, 7u}) table.align_right(c);
  Table buffers({"SERVER", "BUFFER", "BYTES", "OPEN HANDLES"});
  buffers.align_right(2);
  buffers.align_right(3);
  std::uint64_t capacity = 0;
  std::uint64_t used = 0;
  std::map<std::string, std::string> unreachable;
  std::vector<std::string> populating;  // smbd faults its pool in after it starts answering
  for (const auto& s : servers) {
    if (!s.reachable) {
      table.add_row({s.address, "UNREACHABLE", "-", "-", "-", "-", "-", "-"});
      unreachable.emplace(s.address, s.error);
      continue;
    }
    table.add_row({s.served_at.empty() ? s.address : s.address + " (at " + s.served_at + ")", s.transport,
                   util::format_bytes(s.capacity),
                   bytes_with_percent(s.used, s.capacity), util::format_bytes(s.largest_free),
                   s.huge_pages ? "yes" : "no", std::to_string(s.clients),
                   std::to_string(s.buffers.size())});
    for (const auto& b : s.buffers)
      buffers.add_row({s.address, b.name, util::format_bytes(b.bytes), std::to_string(b.open_handles)});
    capacity += s.capacity;
    used += s.used;
    if (s.populated < s.capacity)
      populating.push_back(s.address + ": " + bytes_with_percent(s.populated, s.capacity) + " in place");
  }
  table.print(out);
  out << "total: " << servers.size() << " server(s)";
  if (!unreachable.empty()) out << " (" << unreachable.size() << " unreachable)";
  out << ", capacity " << util::format_bytes(capacity) << ", used " << bytes_with_percent(used, capacity) << '\n';
  print_unreachable(unreachable, out);
  if (!populating.empty()) {
    out << "still faulting its pool in (it serves meanwhile):\n";
    for (const auto& line : populating) out << "  " << line << '\n';
  }
  if (!buffers.empty()) {
    out << '\n';
    buffers.print(out);
  }
}

}  // namespace

bool show_status(Client& client, bool json, std::ostream& out, bool compact) {
  const auto servers = client.status();
  const auto unreachable = static_cast<std::size_t>(
      std::count_if(servers.begin(), servers.end(), [](const ServerStatus& s) { return !s.reachable; }));
  if (!json) {
    print_human(servers, out);
    return unreachable > 0;
  }
  auto list = nlohmann::json::array();
  std::uint64_t capacity = 0;
  std::uint64_t used = 0;
  for (const auto& s : servers) {
    list.push_back(to_json(s));
    capacity += s.capacity;
    used += s.used;
  }
  nlohmann::json doc = {{"servers", std::move(list)},
                        {"degraded", unreachable > 0},
                        {"total", {{"capacity", capacity}, {"used", used}, {"servers", servers.size()},
                                   {"unreachable", unreachable}}}};
  out << doc.dump(compact ? -1 : 2) << '\n';
  return unreachable > 0;
}

}  // namespace smb::smbctl
