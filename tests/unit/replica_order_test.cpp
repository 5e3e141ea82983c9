// The replica-order gate (smb-server/replica_order.hpp), alone: an ordered
// op applies exactly after the op before it, waits when it comes early,
// and is refused when its place is taken or its copy fell behind.
#include "replica_order.hpp"

#include <gtest/gtest.h>

namespace smb::server {
namespace {

TEST(ReplicaOrder, UnorderedOpsAlwaysApply) {
  EXPECT_EQ(check_order(0, 0, false).verdict, OrderVerdict::apply);
  EXPECT_EQ(check_order(41, 0, true).verdict, OrderVerdict::apply) << "a copy behind still takes unordered ops";
}

TEST(ReplicaOrder, AnOpAppliesRightAfterTheOneBeforeIt) {
  EXPECT_EQ(check_order(0, 1, false).verdict, OrderVerdict::apply);
  EXPECT_EQ(check_order(6, 7, false).verdict, OrderVerdict::apply);
}

TEST(ReplicaOrder, AnEarlyOpWaitsForTheVersionBeforeIt) {
  const auto early = check_order(6, 9, false);
  EXPECT_EQ(early.verdict, OrderVerdict::wait);
  EXPECT_EQ(early.wait_for, 8u);
}

TEST(ReplicaOrder, ATakenPlaceAndACopyBehindAreRefused) {
  const auto taken = check_order(7, 7, false);
  EXPECT_EQ(taken.verdict, OrderVerdict::refuse_taken);
  EXPECT_NE(order_refusal(taken, "accumulate on buffer 'w'", 7, 7).find("is taken here (version 7)"),
            std::string::npos);
  const auto behind = check_order(6, 7, true);
  EXPECT_EQ(behind.verdict, OrderVerdict::refuse_behind) << "even in its turn: it waits for no gap again";
  EXPECT_NE(order_refusal(behind, "accumulate on buffer 'w'", 7, 6).find("behind its primary until repaired"),
            std::string::npos);
}

}  // namespace
}  // namespace smb::server
