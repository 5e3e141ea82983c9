#include "protocol/layout_codec.hpp"

#include "protocol/striping.hpp"
#include "util/parse.hpp"

#include <xxhash.h>

#include <algorithm>

namespace smb::protocol {

Body layout_to_body(const Layout& layout) {
  Body body{{"name", layout.name},
            {"size", layout.size},
            {"stripe_unit", layout.stripe_unit},
            {"servers", layout.servers},
            {"shares", layout.shares}};
  if (!layout.instances.empty()) body["instances"] = layout.instances;
  if (layout.replicas != 1) body["replicas"] = layout.replicas;
  if (!layout.stale.empty()) {
    Body stale = Body::array();
    for (const auto& copy : layout.stale) stale.push_back({copy.replica, copy.server});
    body["stale"] = std::move(stale);
  }
  return body;
}

std::optional<std::uint32_t> position_left_without_copy(const Layout& layout) {
  const auto n = static_cast<std::uint32_t>(layout.servers.size());
  for (std::uint32_t p = 0; p < n; ++p) {
    if (layout.shares[p] == 0) continue;  // no stripe there
    bool fresh = false;
    for (std::uint32_t r = 0; r < layout.replicas && !fresh; ++r)
      fresh = !is_stale(layout, {r, copy_server(p, r, n)});
    if (!fresh) return p;
  }
  return std::nullopt;
}

Layout layout_from_body(const Body& body, std::string_view what) {
  if (!body.is_object()) throw Error(Errc::protocol, std::string(what) + ": layout is not a map");
  Layout l;
  l.name = get_string(body, "name", what);
  validate_name(l.name);
  l.size = get_u64(body, "size", what);
  l.stripe_unit = get_u64(body, "stripe_unit", what);
  auto servers = body.find("servers");
  auto shares = body.find("shares");
  if (servers == body.end() || !servers->is_array() || shares == body.end() || !shares->is_array())
    throw Error(Errc::protocol, std::string(what) + ": layout lacks servers or shares arrays");
  if (servers->empty() || servers->size() > kMaxServersPerBuffer || servers->size() != shares->size())
    throw Error(Errc::protocol, std::string(what) + ": layout has a bad number of servers or shares");
  if (l.size == 0 || l.stripe_unit == 0 || l.stripe_unit % 8 != 0)
    throw Error(Errc::protocol, std::string(what) + ": layout needs a size and a stripe unit that is a positive multiple of 8");
  if (l.size / servers->size() > kMaxServerCapacity)
    throw Error(Errc::protocol, std::string(what) + ": layout of " + std::to_string(l.size) +
                                    " bytes cannot fit on " + std::to_string(servers->size()) + " server(s)");
  StripeGeometry g{l.size, l.stripe_unit, static_cast<std::uint32_t>(servers->size())};
  for (std::size_t i = 0; i < servers->size(); ++i) {
    const auto& s = (*servers)[i];
    const auto& b = (*shares)[i];
    if (!s.is_string() || !b.is_number_unsigned())
      throw Error(Errc::protocol, std::string(what) + ": layout entry " + std::to_string(i) + " is malformed");
    l.servers.push_back(util::parse_host_port(s.get<std::string>()).str());
    l.shares.push_back(b.get<std::uint64_t>());
    if (l.shares.back() != g.share(static_cast<std::uint32_t>(i)) || l.shares.back() > kMaxServerCapacity)
      throw Error(Errc::protocol, std::string(what) + ": layout share of server " + std::to_string(i) +
                                      " does not match its geometry");
  }
  // The servers' runs that hold the shares: absent in layouts from before
  // servers had them; otherwise one per server.
  if (auto instances = body.find("instances"); instances != body.end()) {
    if (!instances->is_array() || instances->size() != l.servers.size())
      throw Error(Errc::protocol, std::string(what) + ": layout has a bad number of server instances");
    for (const auto& id : *instances) {
      if (!id.is_number_unsigned()) throw Error(Errc::protocol, std::string(what) + ": layout instance is not a number");
      l.instances.push_back(id.get<std::uint64_t>());
    }
  }
  if (body.contains("replicas")) {
    const auto replicas = get_u64(body, "replicas", what);
    if (replicas < 1 || replicas > kMaxReplicas || replicas > l.servers.size())
      throw Error(Errc::protocol, std::string(what) + ": layout has " + std::to_string(replicas) + " replicas over " +
                                      std::to_string(l.servers.size()) + " server(s) (1 to " +
                                      std::to_string(kMaxReplicas) + ", at most one per server)");
    l.replicas = static_cast<std::uint32_t>(replicas);
  }
  // Copies that fell behind: each names a copy of the layout once, and some
  // copy of every stripe is left out.
  if (auto stale = body.find("stale"); stale != body.end()) {
    if (!stale->is_array() || stale->size() > std::size_t{l.replicas} * l.servers.size())
      throw Error(Errc::protocol, std::string(what) + ": layout has a bad list of stale copies");
    for (const auto& entry : *stale) {
      if (!entry.is_array() || entry.size() != 2 || !entry[0].is_number_unsigned() || !entry[1].is_number_unsigned() ||
          entry[0].get<std::uint64_t>() >= l.replicas || entry[1].get<std::uint64_t>() >= l.servers.size())
        throw Error(Errc::protocol, std::string(what) + ": layout names a stale copy it does not have");
      const CopyRef copy{entry[0].get<std::uint32_t>(), entry[1].get<std::uint32_t>()};
      if (is_stale(l, copy))
        throw Error(Errc::protocol, std::string(what) + ": layout names a stale copy twice");
      l.stale.push_back(copy);
    }
    if (position_left_without_copy(l))
      throw Error(Errc::protocol, std::string(what) + ": layout has every copy of some stripes stale");
  }
  auto sorted = l.servers;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw Error(Errc::protocol, std::string(what) + ": layout names a server twice");
  return l;
}

std::size_t home_server_index(std::string_view name, const std::vector<std::string>& sorted_servers) {
  if (sorted_servers.empty()) return 0;
  const auto h = XXH64(name.data(), name.size(), /*seed=*/0x534d42);
  return static_cast<std::size_t>(h % sorted_servers.size());
}

}  // namespace smb::protocol
