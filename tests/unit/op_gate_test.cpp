// The gate a replicated buffer's changing ops pass (smb-client/op_gate.hpp),
// alone: a repair's pause waits for the ops running and the transfers they
// left in flight, stops new ops until it resumes, and lets a read that
// found no copy wait for the reopening.
#include "op_gate.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <optional>

namespace smb::client {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const auto no_progress = [] {};
const auto none_gone = [](ServerLink*) { return false; };

TEST(OpGate, APauseWaitsForTheOpsRunning) {
  OpGate gate;
  std::optional<OpGate::Pass> running(std::in_place, gate);
  EXPECT_FALSE(gate.pause(Clock::now() + 20ms, no_progress, none_gone)) << "an op still runs";
  gate.resume();
  auto paused = std::async(std::launch::async, [&] { return gate.pause(Clock::now() + 10s, no_progress, none_gone); });
  running.reset();  // the op returns
  EXPECT_TRUE(paused.get());
  gate.resume();
}

TEST(OpGate, APauseStopsNewOpsUntilItResumes) {
  OpGate gate;
  ASSERT_TRUE(gate.pause(Clock::now() + 1s, no_progress, none_gone));
  std::atomic<bool> entered{false};
  auto op = std::async(std::launch::async, [&] {
    const OpGate::Pass pass(gate);
    entered = true;
  });
  EXPECT_EQ(op.wait_for(50ms), std::future_status::timeout);
  EXPECT_FALSE(entered) << "an op passed a paused gate";
  gate.resume();
  op.get();
  EXPECT_TRUE(entered);
}

TEST(OpGate, APauseWaitsForTransfersLeftInFlightOrTheirServersLoss) {
  OpGate gate;
  auto completion = std::make_shared<transport::Completion>();
  completion->expect();
  gate.track(completion, nullptr);
  int progressed = 0;
  EXPECT_FALSE(gate.pause(Clock::now() + 20ms, [&] { ++progressed; }, none_gone)) << "its transfer is in flight";
  EXPECT_GT(progressed, 0) << "the pause drives progress while it waits";
  completion->finish();
  EXPECT_TRUE(gate.pause(Clock::now() + 1s, no_progress, none_gone));
  gate.resume();
  auto stuck = std::make_shared<transport::Completion>();
  stuck->expect();
  gate.track(stuck, nullptr);
  EXPECT_TRUE(gate.pause(Clock::now() + 1s, no_progress, [](ServerLink*) { return true; }))
      << "a transfer on a server that is gone never completes: not waited for";
  gate.resume();
}

TEST(OpGate, AReadThatFoundNoCopyWaitsForTheReopening) {
  OpGate gate;
  EXPECT_FALSE(gate.wait_for_reopening(Clock::now() + 1s)) << "not paused: nothing to wait for";
  ASSERT_TRUE(gate.pause(Clock::now() + 1s, no_progress, none_gone));
  auto read = std::async(std::launch::async, [&] { return gate.wait_for_reopening(Clock::now() + 10s); });
  EXPECT_EQ(read.wait_for(20ms), std::future_status::timeout);
  gate.resume();
  EXPECT_TRUE(read.get());
  ASSERT_TRUE(gate.pause(Clock::now() + 1s, no_progress, none_gone));
  EXPECT_FALSE(gate.wait_for_reopening(Clock::now() + 20ms)) << "still paused at the deadline";
  gate.resume();
}

}  // namespace
}  // namespace smb::client
