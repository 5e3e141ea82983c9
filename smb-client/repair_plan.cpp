#include "repair_plan.hpp"

#include "protocol/layout_codec.hpp"
#include "protocol/striping.hpp"

#include <algorithm>

namespace smb::client {

namespace {

std::uint64_t share_of_copy(const Layout& layout, std::uint32_t replica, std::size_t server) {
  const auto n = static_cast<std::uint32_t>(layout.servers.size());
  return layout.shares[protocol::copy_position(static_cast<std::uint32_t>(server), replica, n)];
}

}  // namespace

RepairPlan plan_repair(const Layout& layout, const std::vector<ShareState>& states) {
  const auto n = static_cast<std::uint32_t>(layout.servers.size());
  RepairPlan plan;
  const auto present = [&](std::size_t s) { return s < states.size() && states[s] == ShareState::ok; };
  const auto is_stale = [&](std::uint32_t r, std::size_t s) {
    return protocol::is_stale(layout, {r, static_cast<std::uint32_t>(s)});
  };
  // Copy r on server x, from a copy of the same stripes present and not stale.
  const auto rebuild_from_another = [&](std::uint32_t r, std::size_t x, bool in_place) {
    const auto length = share_of_copy(layout, r, x);
    if (length == 0) return;
    const auto position = protocol::copy_position(static_cast<std::uint32_t>(x), r, n);
    for (std::uint32_t other = 0; other < layout.replicas; ++other) {
      const auto source = protocol::copy_server(position, other, n);
      if (other == r || !present(source) || is_stale(other, source)) continue;
      plan.rebuilds.push_back({r, x, other, source, length, in_place});
      return;
    }
  };
  for (std::size_t x = 0; x < n && x < states.size(); ++x)
    if (states[x] == ShareState::restarted) plan.restarted.push_back(x);
  for (const auto x : plan.restarted)
    for (std::uint32_t r = 0; r < layout.replicas; ++r) rebuild_from_another(r, x, false);
  for (const auto& copy : layout.stale)
    if (present(copy.server)) rebuild_from_another(copy.replica, copy.server, true);
  // Stale copies rebuilt, in place or on their restarted server.
  for (const auto& b : plan.rebuilds)
    if (is_stale(b.replica, b.target)) plan.fresh.push_back({b.replica, static_cast<std::uint32_t>(b.target)});
  return plan;
}

Layout after_repair(const Layout& layout, const RepairPlan& plan) {
  Layout repaired = layout;
  std::erase_if(repaired.stale, [&](const CopyRef& c) {
    return std::any_of(plan.rebuilds.begin(), plan.rebuilds.end(),
                       [&](const Rebuild& b) { return b.replica == c.replica && b.target == c.server; });
  });
  return repaired;
}

}  // namespace smb::client
