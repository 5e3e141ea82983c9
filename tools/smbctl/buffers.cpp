// smbctl ls, info and rm: the buffers of the fabric.
#include "commands.hpp"
#include "table.hpp"

#include <util/parse.hpp>

#include <nlohmann/json.hpp>

#include <iostream>

namespace smb::smbctl {
namespace {

nlohmann::json to_json(const Layout& layout) {
  auto servers = nlohmann::json::array();
  for (std::size_t i = 0; i < layout.servers.size(); ++i) {
    const std::uint64_t share = i < layout.shares.size() ? layout.shares[i] : 0;
    servers.push_back({{"address", layout.servers[i]}, {"share", share}});
  }
  return {{"name", layout.name},
          {"size", layout.size},
          {"stripe_unit", layout.stripe_unit},
          {"server_count", layout.servers.size()},
          {"servers", std::move(servers)}};
}

}  // namespace

void list_buffers(Client& client, bool json) {
  const auto layouts = client.list();
  if (json) {
    auto list = nlohmann::json::array();
    for (const auto& l : layouts) list.push_back(to_json(l));
    std::cout << nlohmann::json{{"buffers", std::move(list)}}.dump(2) << '\n';
    return;
  }
  if (layouts.empty()) {
    std::cout << "no buffers\n";
    return;
  }
  Table table({"NAME", "SIZE", "STRIPE UNIT", "SERVERS"});
  for (std::size_t c : {1u, 2u, 3u}) table.align_right(c);
  for (const auto& l : layouts)
    table.add_row({l.name, util::format_bytes(l.size), util::format_bytes(l.stripe_unit),
                   std::to_string(l.servers.size())});
  table.print(std::cout);
}

void show_info(Client& client, const std::string& name, bool json) {
  const auto layout = client.info(name);
  if (json) {
    std::cout << to_json(layout).dump(2) << '\n';
    return;
  }
  std::cout << "name:         " << layout.name << '\n'
            << "size:         " << util::format_bytes(layout.size) << " (" << layout.size << " bytes)\n"
            << "stripe unit:  " << util::format_bytes(layout.stripe_unit) << " (" << layout.stripe_unit
            << " bytes)\n"
            << "servers:      " << layout.servers.size() << " (stripe i on server i mod "
            << layout.servers.size() << ")\n";
  Table table({"#", "SERVER", "SHARE"});
  table.align_right(0);
  table.align_right(2);
  for (std::size_t i = 0; i < layout.servers.size(); ++i) {
    const std::uint64_t share = i < layout.shares.size() ? layout.shares[i] : 0;
    table.add_row({std::to_string(i), layout.servers[i], bytes_with_percent(share, layout.size)});
  }
  table.print(std::cout, "  ");
}

void remove_buffer(Client& client, const std::string& name, bool json) {
  client.destroy(name);
  if (json)
    std::cout << nlohmann::json{{"removed", name}}.dump() << '\n';
  else
    std::cout << "removed " << name << '\n';
}

}  // namespace smb::smbctl
