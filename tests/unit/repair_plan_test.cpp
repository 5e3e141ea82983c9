// A repair's plan (smb-client/repair_plan.hpp), alone: which copies are
// rebuilt, where and from which copy, for restarted servers, stale copies,
// unreachable servers and empty shares. Copy r of the stripes at position p
// lives on server (p + r) mod N (protocol/striping.hpp).
#include "repair_plan.hpp"

#include <gtest/gtest.h>

namespace smb::client {
namespace {

using enum ShareState;

Layout three_servers(std::uint32_t replicas, std::vector<std::uint64_t> shares = {100, 200, 300},
                     std::vector<CopyRef> stale = {}) {
  Layout layout;
  layout.name = "w";
  layout.servers = {"a:1", "b:1", "c:1"};
  layout.shares = std::move(shares);
  layout.instances = {1, 2, 3};
  layout.replicas = replicas;
  layout.stale = std::move(stale);
  return layout;
}

TEST(RepairPlan, ARestartedServersCopiesComeFromTheOtherCopyOfTheirStripes) {
  const auto plan = plan_repair(three_servers(2), {ok, restarted, ok});
  // Server 1 holds copy 0 of position 1 (copy 1 on server 2) and copy 1 of
  // position 0 (copy 0 on server 0).
  EXPECT_EQ(plan.rebuilds, (std::vector<Rebuild>{{0, 1, 1, 2, 200, false}, {1, 1, 0, 0, 100, false}}));
  EXPECT_EQ(plan.restarted, (std::vector<std::size_t>{1}));
  EXPECT_TRUE(plan.fresh.empty());
}

TEST(RepairPlan, AStaleCopyIsRebuiltInPlaceAndIsFreshAfterwards) {
  const auto layout = three_servers(2, {100, 200, 300}, {{1, 2}});
  const auto plan = plan_repair(layout, {ok, ok, ok});
  EXPECT_EQ(plan.rebuilds, (std::vector<Rebuild>{{1, 2, 0, 1, 200, true}}));
  EXPECT_TRUE(plan.restarted.empty());
  EXPECT_EQ(plan.fresh, (std::vector<CopyRef>{{1, 2}}));
  EXPECT_TRUE(after_repair(layout, plan).stale.empty());
}

TEST(RepairPlan, AStaleCopyOnARestartedServerIsMadeAnewAndFresh) {
  const auto plan = plan_repair(three_servers(2, {100, 200, 300}, {{0, 1}}), {ok, restarted, ok});
  EXPECT_EQ(plan.rebuilds, (std::vector<Rebuild>{{0, 1, 1, 2, 200, false}, {1, 1, 0, 0, 100, false}}));
  EXPECT_EQ(plan.fresh, (std::vector<CopyRef>{{0, 1}}));
}

TEST(RepairPlan, NoCopyComesFromAStaleOrAbsentOne) {
  // Copy 0 on the restarted server 1 has only copy 1 on server 2 to come
  // from, and that one is stale; the stale one has only the lost one.
  const auto layout = three_servers(2, {100, 200, 300}, {{1, 2}});
  const auto plan = plan_repair(layout, {ok, restarted, ok});
  EXPECT_EQ(plan.rebuilds, (std::vector<Rebuild>{{1, 1, 0, 0, 100, false}}));
  EXPECT_TRUE(plan.fresh.empty());
  EXPECT_EQ(after_repair(layout, plan).stale, (std::vector<CopyRef>{{1, 2}})) << "still stale";
  // An unreachable server is no source either (and nothing of it is rebuilt).
  const auto waiting = plan_repair(three_servers(2, {100, 200, 300}, {{1, 1}}), {unreachable, ok, ok});
  EXPECT_TRUE(waiting.rebuilds.empty());
  EXPECT_TRUE(waiting.restarted.empty());
}

TEST(RepairPlan, TheFirstUsableOtherCopyIsTheSource) {
  // Three copies: copy 0 on server 0 would come from copy 1 (server 1),
  // which is stale, so from copy 2 (server 2).
  const auto plan = plan_repair(three_servers(3, {100, 200, 300}, {{1, 1}}), {restarted, ok, ok});
  ASSERT_FALSE(plan.rebuilds.empty());
  EXPECT_EQ(plan.rebuilds.front(), (Rebuild{0, 0, 2, 2, 100, false}));
}

TEST(RepairPlan, EmptySharesAreNotRebuilt) {
  const auto plan = plan_repair(three_servers(2, {100, 0, 300}), {ok, restarted, ok});
  EXPECT_EQ(plan.rebuilds, (std::vector<Rebuild>{{1, 1, 0, 0, 100, false}}));
  EXPECT_EQ(plan.restarted, (std::vector<std::size_t>{1})) << "its run is still recorded anew";
}

}  // namespace
}  // namespace smb::client
