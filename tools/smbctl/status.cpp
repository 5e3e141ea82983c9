// smbctl status: capacity, use and buffers of every server.
#include "commands.hpp"
#include "table.hpp"

#include <util/parse.hpp>

#include <nlohmann/json.hpp>

#include <iostream>

namespace smb::smbctl {
namespace {

nlohmann::json to_json(const ServerStatus& s) {
  auto buffers = nlohmann::json::array();
  for (const auto& b : s.buffers)
    buffers.push_back({{"name", b.name}, {"bytes", b.bytes}, {"open_handles", b.open_handles}});
  return {{"address", s.address},
          {"transport", s.transport},
          {"capacity", s.capacity},
          {"used", s.used},
          {"used_fraction", s.capacity ? static_cast<double>(s.used) / static_cast<double>(s.capacity) : 0.0},
          {"largest_free", s.largest_free},
          {"huge_pages", s.huge_pages},
          {"clients", s.clients},
          {"buffers", std::move(buffers)}};
}

void print_human(const std::vector<ServerStatus>& servers) {
  Table table({"SERVER", "TRANSPORT", "CAPACITY", "USED", "LARGEST FREE", "HUGE PAGES", "CLIENTS",
               "BUFFERS"});
  for (std::size_t c : {2u, 3u, 4u, 6u, 7u}) table.align_right(c);
  Table buffers({"SERVER", "BUFFER", "BYTES", "OPEN HANDLES"});
  buffers.align_right(2);
  buffers.align_right(3);
  std::uint64_t capacity = 0;
  std::uint64_t used = 0;
  for (const auto& s : servers) {
    table.add_row({s.address, s.transport, util::format_bytes(s.capacity),
                   bytes_with_percent(s.used, s.capacity), util::format_bytes(s.largest_free),
                   s.huge_pages ? "yes" : "no", std::to_string(s.clients),
                   std::to_string(s.buffers.size())});
    for (const auto& b : s.buffers)
      buffers.add_row({s.address, b.name, util::format_bytes(b.bytes), std::to_string(b.open_handles)});
    capacity += s.capacity;
    used += s.used;
  }
  table.print(std::cout);
  std::cout << "total: " << servers.size() << " server(s), capacity " << util::format_bytes(capacity)
            << ", used " << bytes_with_percent(used, capacity) << '\n';
  if (!buffers.empty()) {
    std::cout << '\n';
    buffers.print(std::cout);
  }
}

}  // namespace

void show_status(Client& client, bool json) {
  const auto servers = client.status();
  if (!json) return print_human(servers);
  auto list = nlohmann::json::array();
  std::uint64_t capacity = 0;
  std::uint64_t used = 0;
  for (const auto& s : servers) {
    list.push_back(to_json(s));
    capacity += s.capacity;
    used += s.used;
  }
  nlohmann::json doc = {{"servers", std::move(list)},
                        {"total", {{"capacity", capacity}, {"used", used}}}};
  std::cout << doc.dump(2) << '\n';
}

}  // namespace smb::smbctl
