#include "protocol/server_map.hpp"

#include "util/parse.hpp"

namespace smb::protocol {

const std::string& ServerMap::resolve(const std::string& slot) const {
  auto it = entries_.find(slot);
  return it == entries_.end() ? slot : it->second.address;
}

std::optional<std::string> ServerMap::slot_of(std::string_view address) const {
  for (const auto& [slot, entry] : entries_)
    if (entry.address == address && slot != address) return slot;
  return std::nullopt;
}

ServerMap::Entry ServerMap::replace(const std::string& slot, const std::string& address) {
  if (auto serving = slot_of(address); serving && *serving != slot)
    throw Error(Errc::invalid_argument, "server " + util::quoted(address) + " already serves the place of " +
                                            util::quoted(*serving) + ": one server replaces one other");
  if (entries_.size() >= kMaxReplacedServers && !entries_.contains(slot))
    throw Error(Errc::no_space, "no more than " + std::to_string(kMaxReplacedServers) + " servers can be replaced");
  auto& entry = entries_[slot];
  entry.address = address;
  entry.epoch += 1;
  return entry;
}

bool ServerMap::merge(const Body& replaced, const std::string& context) {
  auto bad = [&](const std::string& why) {
    return Error(Errc::protocol, context + ": 'replaced' " + why);
  };
  if (!replaced.is_object() || replaced.size() > kMaxReplacedServers) throw bad("must be a map of at most " +
                                                                                std::to_string(kMaxReplacedServers) +
                                                                                " slots");
  bool changed = false;
  for (const auto& [slot, value] : replaced.items()) {
    if (!value.is_array() || value.size() != 2 || !value[0].is_string() || !value[1].is_number_unsigned())
      throw bad("entries must be [address, epoch]");
    const auto address = value[0].get<std::string>();
    try {
      util::parse_host_port(slot);
      util::parse_host_port(address);
    } catch (const std::exception& e) {
      throw bad(std::string("names a malformed address: ") + e.what());
    }
    const auto epoch = value[1].get<std::uint64_t>();
    auto it = entries_.find(slot);
    if (it != entries_.end() && it->second.epoch >= epoch) continue;
    if (it == entries_.end() && entries_.size() >= kMaxReplacedServers) throw bad("has too many slots");
    entries_[slot] = Entry{address, epoch};
    changed = true;
  }
  return changed;
}

Body ServerMap::to_body() const {
  Body out = Body::object();
  for (const auto& [slot, entry] : entries_) out[slot] = Body::array({entry.address, entry.epoch});
  return out;
}

}  // namespace smb::protocol
