// smbctl ls, info and rm: the buffers of the fabric.
#include "commands.hpp"
#include "table.hpp"

#include <protocol/layout_codec.hpp>
#include <protocol/striping.hpp>
#include <util/parse.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <thread>
#include <map>
#include <set>
#include <iostream>

namespace smb::smbctl {
namespace {

// Server of copy r of the stripes at position p (their server in copy 0).
std::size_t copy_server(const Layout& layout, std::size_t position, std::uint32_t replica) {
  return protocol::copy_server(static_cast<std::uint32_t>(position), replica,
                               static_cast<std::uint32_t>(layout.servers.size()));
}

// Bytes server i holds over all copies.
std::uint64_t held_by(const Layout& layout, std::size_t server) {
  std::uint64_t bytes = 0;
  for (std::uint32_t r = 0; r < layout.replicas; ++r)
    bytes += layout.shares[protocol::copy_position(static_cast<std::uint32_t>(server), r,
                                                   static_cast<std::uint32_t>(layout.servers.size()))];
  return bytes;
}

bool is_stale(const Layout& layout, std::uint32_t replica, std::size_t server) {
  return protocol::is_stale(layout, {replica, static_cast<std::uint32_t>(server)});
}

// A copy's state: its server's ("ok", "unreachable", "restarted"), or
// "stale" where it fell behind the others on a live server (Layout::stale).
std::string copy_state(const Layout& layout, const std::vector<ShareState>& states, std::size_t position,
                       std::uint32_t replica) {
  const auto s = copy_server(layout, position, replica);
  if (states[s] != ShareState::ok) return share_state_name(states[s]);
  return is_stale(layout, replica, s) ? "stale" : "ok";
}

// "ok", "degraded" (a copy gone or stale, another left) or "lost" (every copy).
std::string position_state(const Layout& layout, const std::vector<ShareState>& states, std::size_t position) {
  std::uint32_t ok = 0;
  for (std::uint32_t r = 0; r < layout.replicas; ++r) ok += copy_state(layout, states, position, r) == "ok";
  return ok == layout.replicas ? "ok" : ok > 0 ? "degraded" : "lost";
}

nlohmann::json to_json(const Layout& layout, const std::vector<ShareState>& states) {
  auto servers = nlohmann::json::array();
  for (std::size_t i = 0; i < layout.servers.size(); ++i) {
    const std::uint64_t share = i < layout.shares.size() ? layout.shares[i] : 0;
    servers.push_back({{"address", layout.servers[i]},
                       {"share", share},
                       {"holds", held_by(layout, i)},
                       {"state", share_state_name(states[i])}});
  }
  auto stripes = nlohmann::json::array();
  for (std::size_t p = 0; p < layout.servers.size(); ++p) {
    auto copies = nlohmann::json::array();
    for (std::uint32_t r = 0; r < layout.replicas; ++r) {
      const auto s = copy_server(layout, p, r);
      copies.push_back({{"address", layout.servers[s]}, {"state", copy_state(layout, states, p, r)}});
    }
    stripes.push_back({{"position", p},
                       {"share", layout.shares[p]},
                       {"state", position_state(layout, states, p)},
                       {"copies", std::move(copies)}});
  }
  return {{"name", layout.name},
          {"size", layout.size},
          {"stripe_unit", layout.stripe_unit},
          {"server_count", layout.servers.size()},
          {"replicas", layout.replicas},
          {"state", buffer_state(layout, states)},
          {"servers", std::move(servers)},
          {"stripes", std::move(stripes)}};
}

nlohmann::json unreachable_json(const std::map<std::string, std::string>& unreachable) {
  auto list = nlohmann::json::array();
  for (const auto& [address, error] : unreachable) list.push_back({{"address", address}, {"error", error}});
  return list;
}

// A replicated buffer is lost only where every copy of some stripes is gone.
std::string replicated_state(const Layout& layout, const std::vector<ShareState>& states) {
  std::string lost, gone;
  for (std::size_t p = 0; p < layout.servers.size(); ++p) {
    if (layout.shares[p] == 0 || position_state(layout, states, p) != "lost") continue;
    std::string where;
    for (std::uint32_t r = 0; r < layout.replicas; ++r)
      where += (r == 0 ? "" : " and ") + layout.servers[copy_server(layout, p, r)];
    lost += (lost.empty() ? "" : "; ") + where;
  }
  if (!lost.empty())
    return "lost: every copy of its stripes on " + lost + " is gone (unreachable, restarted or stale)";
  for (std::size_t i = 0; i < states.size(); ++i)
    if (states[i] != ShareState::ok)
      gone += (gone.empty() ? "" : ", ") + layout.servers[i] + " " + share_state_name(states[i]);
  for (const auto& copy : layout.stale)
    if (states[copy.server] == ShareState::ok)
      gone += (gone.empty() ? "" : ", ") + layout.servers[copy.server] + " stale (copy " +
              std::to_string(copy.replica) + " fell behind; smbctl repair rebuilds it)";
  if (!gone.empty()) return "degraded: copies on " + gone + "; every stripe keeps a copy";
  return "ok";
}

// Buffers whose segments a server holds but whose layout no server asked
// keeps: {name: [servers holding a segment of it]}. Their layouts are on
// servers the list does not name (a mismatched SMB_SERVERS), so ls would
// otherwise leave them out without a word.
std::map<std::string, std::vector<std::string>> uncovered(Client& client, const std::vector<Layout>& layouts) {
  std::set<std::string> listed;
  for (const auto& l : layouts) listed.insert(l.name);
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& server : client.status()) {
    for (const auto& segment : server.buffers) {
      const auto suffix = segment.name.rfind('#');  // "NAME#rK": copy K of NAME ('#' is in no buffer name)
      const auto name = suffix == std::string::npos ? segment.name : segment.name.substr(0, suffix);
      if (listed.contains(name)) continue;
      auto& holders = out[name];
      if (std::find(holders.begin(), holders.end(), server.address) == holders.end()) holders.push_back(server.address);
    }
  }
  return out;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ",") + i;
  return out;
}

}  // namespace

std::string buffer_state(const Layout& layout, const std::vector<ShareState>& states) {
  if (layout.replicas > 1) return replicated_state(layout, states);
  std::size_t unreachable = 0;
  std::string restarted;
  for (std::size_t i = 0; i < states.size(); ++i) {
    if (states[i] == ShareState::unreachable) ++unreachable;
    if (states[i] == ShareState::restarted && layout.shares[i] > 0)
      restarted += (restarted.empty() ? "" : ", ") + layout.servers[i];
  }
  if (!restarted.empty()) return "lost: " + restarted + " restarted; its stripes of this buffer are gone";
  if (unreachable > 0)
    return "degraded: " + std::to_string(unreachable) + " of " + std::to_string(states.size()) +
           " servers unreachable";
  return "ok";
}

void print_unreachable(const std::map<std::string, std::string>& unreachable, std::ostream& out) {
  for (const auto& [address, error] : unreachable) out << "unreachable: " << address << ": " << error << '\n';
}

bool list_buffers(Client& client, bool json) {
  const auto layouts = client.list();
  std::vector<std::vector<ShareState>> states;
  bool degraded = false;
  for (const auto& l : layouts) {
    states.push_back(client.check(l));
    degraded = degraded || buffer_state(l, states.back()) != "ok";
  }
  auto orphans = uncovered(client, layouts);
  if (!orphans.empty()) {
    // A buffer created or destroyed while this looked is no orphan: only
    // what a second look, a moment later, still finds uncovered is.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto again = uncovered(client, client.list());
    std::erase_if(orphans, [&](const auto& o) { return !again.contains(o.first); });
  }
  const auto unreachable = client.unreachable_servers();
  degraded = degraded || !unreachable.empty() || !orphans.empty();
  if (json) {
    auto list = nlohmann::json::array();
    for (std::size_t i = 0; i < layouts.size(); ++i) list.push_back(to_json(layouts[i], states[i]));
    auto unlisted = nlohmann::json::array();
    for (const auto& [name, servers] : orphans) unlisted.push_back({{"name", name}, {"held_by", servers}});
    // Layouts live on their names' home servers: those homed on an
    // unreachable server cannot be listed.
    std::cout << nlohmann::json{{"buffers", std::move(list)},
                                {"degraded", degraded},
                                {"asked", client.servers()},
                                {"unlisted", std::move(unlisted)},
                                {"unreachable", unreachable_json(unreachable)}}
                     .dump(2)
              << '\n';
    return degraded;
  }
  if (layouts.empty()) {
    std::cout << "no buffers" << (unreachable.empty() ? "" : " on the reachable servers") << '\n';
  } else {
    Table table({"NAME", "SIZE", "STRIPE UNIT", "SERVERS", "STATE"});
    for (std::size_t c : {1u, 2u, 3u}) table.align_right(c);
    for (std::size_t i = 0; i < layouts.size(); ++i) {
      const auto& l = layouts[i];
      table.add_row({l.name, util::format_bytes(l.size), util::format_bytes(l.stripe_unit),
                     std::to_string(l.servers.size()), buffer_state(l, states[i])});
    }
    table.print(std::cout);
  }
  if (!unreachable.empty()) {
    std::cout << "buffers whose layouts the unreachable servers keep are not listed\n";
    print_unreachable(unreachable, std::cout);
  }
  if (!orphans.empty()) {
    std::cout << "\n" << orphans.size() << " buffer(s) not listed: these servers hold segments of them, but no "
              << "server asked (" << joined(client.servers()) << ") keeps their layout:\n";
    for (const auto& [name, servers] : orphans) std::cout << "  " << util::quoted(name) << " on " << joined(servers) << '\n';
    std::cout << "their layouts are on servers this list does not name: give every server of the fabric "
                 "(--servers or SMB_SERVERS)\n";
  }
  return degraded;
}

bool show_info(Client& client, const std::string& name, bool json) {
  const auto layout = client.info(name);
  const auto states = client.check(layout);
  if (json) {
    std::cout << to_json(layout, states).dump(2) << '\n';
    return buffer_state(layout, states) != "ok";
  }
  std::cout << "name:         " << layout.name << '\n'
            << "size:         " << util::format_bytes(layout.size) << " (" << layout.size << " bytes)\n"
            << "stripe unit:  " << util::format_bytes(layout.stripe_unit) << " (" << layout.stripe_unit
            << " bytes)\n"
            << "servers:      " << layout.servers.size() << " (stripe i on server i mod "
            << layout.servers.size() << ")\n";
  if (layout.replicas > 1)
    std::cout << "replicas:     " << layout.replicas << " (copy r of stripe i on server (i + r) mod "
              << layout.servers.size() << ")\n";
  std::cout << "state:        " << buffer_state(layout, states) << '\n';
  Table table({"#", "SERVER", layout.replicas > 1 ? "HOLDS" : "SHARE", "STATE"});
  table.align_right(0);
  table.align_right(2);
  for (std::size_t i = 0; i < layout.servers.size(); ++i)
    table.add_row({std::to_string(i), layout.servers[i], bytes_with_percent(held_by(layout, i), layout.size),
                   share_state_name(states[i])});
  table.print(std::cout, "  ");
  if (layout.replicas > 1) {
    std::cout << "stripes:\n";
    std::vector<std::string> head{"#", "SHARE", "STATE"};
    for (std::uint32_t r = 0; r < layout.replicas; ++r) head.push_back("COPY " + std::to_string(r));
    Table stripes(head);
    stripes.align_right(0);
    stripes.align_right(1);
    for (std::size_t p = 0; p < layout.servers.size(); ++p) {
      std::vector<std::string> row{std::to_string(p), bytes_with_percent(layout.shares[p], layout.size),
                                   position_state(layout, states, p)};
      for (std::uint32_t r = 0; r < layout.replicas; ++r) {
        row.push_back(layout.servers[copy_server(layout, p, r)] + " " + copy_state(layout, states, p, r));
      }
      stripes.add_row(row);
    }
    stripes.print(std::cout, "  ");
  }
  return buffer_state(layout, states) != "ok";
}

void remove_buffer(Client& client, const std::string& name, bool json) {
  client.destroy(name);
  if (json)
    std::cout << nlohmann::json{{"removed", name}}.dump() << '\n';
  else
    std::cout << "removed " << name << '\n';
}

}  // namespace smb::smbctl
