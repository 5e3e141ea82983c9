// Client::replace_server: a server lost for good is served by a new smbd at
// another address from now on (docs/reliability.md, "Replacing a server").
// The lost server's address stays the slot's name (layouts, homes and
// client lists keep it); every reachable server is told where the slot is
// served now (replace_server), and hands that on in its hello to every
// client, which connects there instead. A repair then rebuilds the lost
// copies on the new server as on a restarted one (its run is new), and
// writes back the layout records it kept.
#include "client_core.hpp"

#include "util/parse.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace smb {

using protocol::Body;
using protocol::MessageType;

namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

}  // namespace

std::vector<std::string> ClientCore::replace_server(const std::string& lost, const std::string& replacement) {
  auto slot = util::parse_host_port(lost).str();
  const auto address = util::parse_host_port(replacement).str();
  const auto context = "replacing server " + slot + " by " + address;
  std::unique_lock lock(links_mutex_);
  refresh_server_map("");  // the newest map any linked server has
  if (auto named = server_map_.slot_of(slot)) slot = *named;  // a replacement's address names its slot
  if (!std::binary_search(sorted_servers_.begin(), sorted_servers_.end(), slot))
    throw Error(Errc::invalid_argument, context + ": " + slot + " is not one of this fabric's servers (" +
                                            join(sorted_servers_) + ")");
  if (address != slot && std::binary_search(sorted_servers_.begin(), sorted_servers_.end(), address))
    throw Error(Errc::invalid_argument, context + ": " + address + " is one of the fabric's servers already; " +
                                            "a replacement is a new smbd at an address of its own");
  if (auto serving = server_map_.slot_of(address); serving && *serving != slot)
    throw Error(Errc::invalid_argument, context + ": " + address + " serves the place of " + *serving + " already");
  // Only a lost server: a live one's clients would go on writing its copies
  // while the repair rebuilds them elsewhere.
  if (auto it = links_.find(slot); it != links_.end()) retire(it);
  try {
    connect(slot);
    throw Error(Errc::invalid_argument, context + ": " + slot + " answers at " + server_map_.resolve(slot) +
                                            ". Only a lost server is replaced: a live one's clients would go on "
                                            "writing its copies. Stop its smbd first.");
  } catch (const Error& e) {
    if (!client::is_absence(e)) throw;
  }
  // The replacement must answer before anyone is sent there.
  const auto entry = [&] {
    auto trial = server_map_;
    auto made = trial.replace(slot, address);
    std::swap(server_map_, trial);
    try {
      connect(slot);
    } catch (const Error& e) {
      std::swap(server_map_, trial);
      throw Error(e.code(), context + ": the replacement cannot be reached: " + e.what());
    }
    return made;
  }();
  unreachable_.erase(slot);
  const Body request{{"slot", slot}, {"address", entry.address}, {"epoch", entry.epoch}};
  std::vector<std::string> told;
  for (const auto& server : sorted_servers_) {
    lock.unlock();
    try {
      link(server).control->call(MessageType::replace_server, request);
      told.push_back(server);
    } catch (const Error& e) {
      if (!client::is_absence(e)) throw Error(e.code(), context + ": server " + server + ": " + e.what());
      spdlog::warn("{}: server {} cannot be told now ({}); a repair tells it later", context, server, e.what());
    }
    lock.lock();
  }
  spdlog::info("{}: told {} of {} servers", context, told.size(), sorted_servers_.size());
  return told;
}

// Every server reachable learns the replacements it lacks (one that
// restarted forgot them): each repair does this first.
void ClientCore::publish_server_map() {
  const auto map = server_map();  // the union of the hellos so far
  if (map.empty()) return;
  for (const auto& server : sorted_servers_) {
    try {
      auto& l = link(server);
      for (const auto& [slot, entry] : map.entries())
        l.control->call(MessageType::replace_server,
                        Body{{"slot", slot}, {"address", entry.address}, {"epoch", entry.epoch}});
    } catch (const Error& e) {
      if (!client::is_absence(e)) throw;
    }
  }
}

}  // namespace smb
