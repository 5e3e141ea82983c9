// Coordination through real smbd processes: version waits woken by another
// client's op, leased range locks (FIFO, released when the holder dies or its
// lease runs out), and barriers that fail rather than hang when a participant
// dies.
#include "expect_error.hpp"
#include "fabric.hpp"
#include "party.hpp"
#include "server_waits.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <span>
#include <thread>
#include <vector>

namespace {

using namespace smb::test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class CoordinationTest : public FabricTest {};

TEST_P(CoordinationTest, VersionWaitIsWokenByAnotherClientsOp) {
  auto waiter_client = make_client();
  auto buffer = waiter_client.create("versioned", 4096);
  const auto start = buffer.version();
  auto woken = std::async(std::launch::async, [&] { return buffer.wait_version(start + 1, 10s); });
  auto other = make_client();
  ASSERT_TRUE(waits_reach(other, [](const smb::ServerWaits& w) { return w.versions >= 1; }));
  ASSERT_EQ(woken.wait_for(0s), std::future_status::timeout) << "returned before any update";
  other.open("versioned").apply(smb::VectorOp::scale, smb::DType::f32, 0, 1024, 2.0);
  EXPECT_GE(woken.get(), start + 1);
  EXPECT_EQ(buffer.version(), start + 1);
  expect_errc(smb::Errc::timeout, [&] { buffer.wait_version(start + 5, 200ms); }, "a version nobody reaches");
}

// Version waits time out in deadline order whatever order they came in (a
// short wait behind a long one is not held to the long one's timer), and one
// op wakes every waiter it satisfies, from several clients.
TEST_P(CoordinationTest, VersionWaitsTimeOutInDeadlineOrderAndOneOpWakesThemAll) {
  auto owner = make_client();
  auto buffer = owner.create("waited", 4096);
  const auto start = buffer.version();
  std::vector<smb::Client> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(make_client());
  std::vector<std::future<std::uint64_t>> long_waits;
  for (auto& c : clients)
    long_waits.push_back(std::async(std::launch::async, [&c, start] { return c.open("waited").wait_version(start + 1, 20s); }));
  ASSERT_TRUE(waits_reach(owner, [](const smb::ServerWaits& w) { return w.versions >= 3; }));
  const auto began = Clock::now();
  expect_errc(smb::Errc::timeout, [&] { buffer.wait_version(start + 1, 300ms); }, "a short wait behind long ones");
  EXPECT_LT(Clock::now() - began, 5s) << "the short wait was held to a longer wait's deadline";
  for (auto& w : long_waits) ASSERT_EQ(w.wait_for(0s), std::future_status::timeout) << "a long wait ended early";
  buffer.apply(smb::VectorOp::scale, smb::DType::f32, 0, 1024, 1.0);
  for (auto& w : long_waits) {
    ASSERT_EQ(w.wait_for(10s), std::future_status::ready) << "a waiter was not woken by the op";
    EXPECT_GE(w.get(), start + 1);
  }
}

TEST_P(CoordinationTest, LocksExcludeOverlappingRangesAndHandOverOnUnlock) {
  auto a = make_client();
  auto b = make_client();
  smb::LockOptions whole;
  auto held = a.lock("params", whole);
  smb::LockOptions quick;
  quick.timeout = 200ms;
  expect_errc(smb::Errc::timeout, [&] { b.lock("params", quick); }, "lock held by another client");
  smb::LockOptions left, right;
  left.offset = 0, left.length = 100, right.offset = 100, right.length = 100;
  held.unlock();
  auto l = a.lock("ranges", left);
  auto r = b.lock("ranges", right);  // disjoint: granted at once
  EXPECT_TRUE(l.held() && r.held());
  auto again = a.lock("params", whole);  // a holds it again, then b asks and waits
  auto next = std::async(std::launch::async, [&] { return b.lock("params", whole); });
  ASSERT_EQ(next.wait_for(200ms), std::future_status::timeout);
  again.unlock();
  EXPECT_TRUE(next.get().held());
}

TEST_P(CoordinationTest, AnExpiredLeaseHandsTheLockOnAndItsUnlockFails) {
  auto a = make_client();
  auto b = make_client();
  smb::LockOptions short_lease;
  short_lease.lease = 300ms;
  auto stale = a.lock("leased", short_lease);
  const auto begin = Clock::now();
  auto fresh = b.lock("leased");  // waits for the lease to run out
  EXPECT_GE(Clock::now() - begin, 250ms);
  EXPECT_TRUE(fresh.held());
  expect_errc(smb::Errc::not_found, [&] { stale.unlock(); }, "unlock after the lease expired");
}

TEST_P(CoordinationTest, AKilledHolderLosesItsLockAtOnce) {
  Party holder(server_list(), {"lock", "orphan"});  // holds it with a 60 s lease
  auto client = make_client();
  smb::LockOptions quick;
  quick.timeout = 200ms;
  expect_errc(smb::Errc::timeout, [&] { client.lock("orphan", quick); }, "held by the live party");
  holder.kill();
  const auto begin = Clock::now();
  auto lock = client.lock("orphan");
  EXPECT_LT(Clock::now() - begin, 5s) << "granted only after the lease, not when the holder died";
}

TEST_P(CoordinationTest, BarrierReleasesEveryPartyTogether) {
  constexpr int kParties = 3;
  std::vector<std::future<void>> parties;
  for (int i = 0; i < kParties; ++i)
    parties.push_back(std::async(std::launch::async, [&] {
      auto client = make_client();
      client.barrier("step", kParties, 10s);
    }));
  for (auto& p : parties) EXPECT_NO_THROW(p.get());
  auto client = make_client();
  expect_errc(smb::Errc::timeout, [&] { client.barrier("alone", 2, 200ms); }, "a party that never comes");
}

// Waits use connections of their own: while one thread of a client waits at
// a barrier and another for a lock, the same client still creates, writes
// and reads (on the same home server), and can even be the barrier's other party.
TEST_P(CoordinationTest, WaitsDoNotHoldUpTheClientsOtherRequests) {
  auto client = make_client();
  auto held = client.lock("busy-lock");
  auto at_barrier = std::async(std::launch::async, [&] { client.barrier("meet", 2, 20s); });
  auto for_lock = std::async(std::launch::async, [&] { return client.lock("busy-lock"); });
  auto observer = make_client();
  ASSERT_TRUE(waits_reach(observer, [](const smb::ServerWaits& w) { return w.barrier_parties >= 1 && w.locks >= 1; }));
  ASSERT_EQ(at_barrier.wait_for(0s), std::future_status::timeout);
  ASSERT_EQ(for_lock.wait_for(0s), std::future_status::timeout);
  const auto begin = Clock::now();
  auto buffer = client.create("during-waits", 4096);
  std::vector<std::uint8_t> data(4096, 7), back(4096);
  buffer.write(0, std::as_bytes(std::span(data)));
  buffer.read(0, std::as_writable_bytes(std::span(back)));
  EXPECT_EQ(back, data);
  EXPECT_FALSE(client.status().empty());
  EXPECT_LT(Clock::now() - begin, 5s) << "control requests waited behind the blocked ones";
  EXPECT_EQ(at_barrier.wait_for(0s), std::future_status::timeout);
  client.barrier("meet", 2, 20s);  // the second party, from the same client
  EXPECT_NO_THROW(at_barrier.get());
  held.unlock();
  EXPECT_TRUE(for_lock.get().held());
}

TEST_P(CoordinationTest, BarrierWithAKilledParticipantIsAnErrorNotAHang) {
  Party participant(server_list(), {"barrier", "doomed", "3"});
  auto client = make_client();
  auto mine = std::async(std::launch::async, [&] { client.barrier("doomed", 3, 30s); });
  // Both have arrived (the third party never will) before the party dies.
  ASSERT_TRUE(waits_reach(client, [](const smb::ServerWaits& w) { return w.barrier_parties >= 2; }));
  participant.kill();
  ASSERT_EQ(mine.wait_for(10s), std::future_status::ready) << "the barrier hung after a participant died";
  expect_errc(smb::Errc::server_gone, [&] { mine.get(); }, "barrier with a dead participant");
}

// stat's `waiting` counts what each server owes an answer: a version wait,
// barrier parties, a queued lock request; each leaves the count when it is
// answered (what the tests above wait for instead of sleeping).
TEST_P(CoordinationTest, StatCountsWhatWaitsUntilItIsAnswered) {
  auto client = make_client();
  auto observer = make_client();
  EXPECT_TRUE(waits_reach(observer, [](const smb::ServerWaits& w) {
    return w.versions == 0 && w.barrier_parties == 0 && w.locks == 0;
  })) << "a fresh fabric owes nothing";
  auto buffer = client.create("counted", 4096);
  auto held = client.lock("counted-lock");
  auto version = std::async(std::launch::async, [&] { return buffer.wait_version(buffer.version() + 1, 20s); });
  auto party = std::async(std::launch::async, [&] { client.barrier("counted-barrier", 2, 20s); });
  auto queued = std::async(std::launch::async, [&] { return client.lock("counted-lock"); });
  ASSERT_TRUE(waits_reach(observer, [](const smb::ServerWaits& w) {
    return w.versions == 1 && w.barrier_parties == 1 && w.locks == 1;
  }));
  buffer.apply(smb::VectorOp::scale, smb::DType::f32, 0, 1024, 1.0);
  observer.barrier("counted-barrier", 2, 20s);
  held.unlock();
  EXPECT_GE(version.get(), 1u);
  party.get();
  EXPECT_TRUE(queued.get().held());
  EXPECT_TRUE(waits_reach(observer, [](const smb::ServerWaits& w) {
    return w.versions == 0 && w.barrier_parties == 0 && w.locks == 0;
  })) << "answered waits must leave the count";
}

INSTANTIATE_TEST_SUITE_P(Fabrics, CoordinationTest, testing::ValuesIn(all_fabrics()), fabric_name);

}  // namespace
