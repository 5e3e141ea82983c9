// Locks and barriers that survive the loss of their name's home
// (docs/reliability.md, "Locks and barriers with two keepers"): a lock is
// held at the home and the next server, so that the holder keeps it, and
// nobody else gets it, through the loss of either; a holder restores its
// hold at a keeper that returns, within that keeper's grace; a barrier
// whose home is lost while its parties wait completes at the next keeper.
// Each case kills the holder, a waiter or a keeper at one step.
#include "expect_error.hpp"
#include "party.hpp"
#include "replication_fixture.hpp"
#include "server_waits.hpp"

#include <future>

namespace {

using namespace smb::test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class KeeperCoordinationTest : public ReplicationTest {
 protected:
  // The lock is not to be had: a short try times out.
  void expect_held_elsewhere(smb::Client& client, const std::string& name, const std::string& when) {
    smb::LockOptions quick;
    quick.timeout = 300ms;
    expect_errc(smb::Errc::timeout, [&] { client.lock(name, quick); }, "a second holder " + when);
  }
  std::size_t next_keeper_of(const std::string& name) const { return index_of(keeper_after(home_of(name), 1)); }
  // Longer than smbd's default --lock-grace (2 s): a restarted keeper then
  // grants as any other.
  static constexpr auto kPastGrace = 2500ms;
};

TEST_P(KeeperCoordinationTest, AHeldLockOutlivesItsHomesLossAndIsRestoredWhenTheHomeReturns) {
  const std::string name = "kc-held";
  auto holder = make_client();
  auto lock = holder.lock(name);
  auto other = make_client();
  expect_held_elsewhere(other, name, "while both keepers hold it");

  const auto home = home_of(name);
  server(home).kill();
  expect_held_elsewhere(other, name, "with the home lost");
  restart_server(home);
  expect_held_elsewhere(other, name, "with the home back, in its grace");
  std::this_thread::sleep_for(kPastGrace);
  expect_held_elsewhere(other, name, "with the home back, past its grace");
  // The home alone keeps it now: the holder restored its hold there.
  server(next_keeper_of(name)).kill();
  expect_held_elsewhere(other, name, "with the next keeper lost, the restarted home left");

  EXPECT_TRUE(lock.held());
  lock.unlock();
  const auto begin = Clock::now();
  auto second = other.lock(name);
  EXPECT_LT(Clock::now() - begin, 3s);
}

TEST_P(KeeperCoordinationTest, ALockTakenWhileItsHomeIsDownIsRestoredThereWhenItReturns) {
  const std::string name = "kc-down";
  const auto home = home_of(name);
  server(home).kill();
  auto holder = make_client();
  auto lock = holder.lock(name);  // at the next keeper alone
  auto other = make_client();
  expect_held_elsewhere(other, name, "taken at the next keeper alone");
  restart_server(home);
  std::this_thread::sleep_for(kPastGrace);
  server(next_keeper_of(name)).kill();
  expect_held_elsewhere(other, name, "after the home returned and the next keeper was lost");
  lock.unlock();
  auto second = other.lock(name);
  EXPECT_TRUE(second.held());
}

TEST_P(KeeperCoordinationTest, AWaiterAtALostHomeWaitsOnAtTheNextKeeperUntilTheUnlock) {
  const std::string name = "kc-wait";
  auto holder = make_client();
  auto lock = holder.lock(name);
  auto waiter = make_client();
  std::atomic<bool> granted{false};
  auto waiting = std::async(std::launch::async, [&] {
    smb::LockOptions patient;
    patient.timeout = 30s;
    auto got = waiter.lock(name, patient);
    granted = true;
    return got;
  });
  ASSERT_TRUE(waits_reach(holder, [](const smb::ServerWaits& w) { return w.locks >= 1; }));
  server(home_of(name)).kill();
  std::this_thread::sleep_for(500ms);
  EXPECT_FALSE(granted) << "granted while the holder still holds it at the next keeper";
  lock.unlock();
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready) << "the waiter was not granted after the unlock";
  auto got = waiting.get();
  EXPECT_TRUE(got.held());
}

TEST_P(KeeperCoordinationTest, AKilledHolderReleasesAtTheKeeperLeft) {
  const std::string name = "kc-orphan";
  Party holder(server_list(), {"lock", name});
  auto other = make_client();
  server(home_of(name)).kill();
  expect_held_elsewhere(other, name, "while the holder lives");
  holder.kill();
  const auto begin = Clock::now();
  auto lock = other.lock(name);
  EXPECT_LT(Clock::now() - begin, 5s) << "granted only after the lease, not when the holder died";
}

TEST_P(KeeperCoordinationTest, ALeaseRunsOutAtTheKeeperLeft) {
  const std::string name = "kc-lease";
  auto holder = make_client();
  smb::LockOptions brief;
  brief.lease = 600ms;
  auto stale = holder.lock(name, brief);
  server(home_of(name)).kill();
  auto other = make_client();
  auto fresh = other.lock(name);
  EXPECT_TRUE(fresh.held());
  expect_errc(smb::Errc::not_found, [&] { stale.unlock(); }, "unlock after the lease expired");
}

// The lease runs from the grant at the first keeper, and the next keeper's
// is cut to end with it: a wait longer than the lease leaves both alive.
TEST_P(KeeperCoordinationTest, ALeaseRunsFromTheGrantNotFromTheRequest) {
  const std::string name = "kc-late";
  auto holder = make_client();
  auto first = holder.lock(name);
  auto waiter = make_client();
  auto waiting = std::async(std::launch::async, [&] {
    smb::LockOptions late;
    late.lease = 1s;
    late.timeout = 30s;
    return waiter.lock(name, late);
  });
  ASSERT_TRUE(waits_reach(holder, [](const smb::ServerWaits& w) { return w.locks >= 1; }));
  std::this_thread::sleep_for(1500ms);
  first.unlock();
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  auto got = waiting.get();
  std::this_thread::sleep_for(300ms);
  got.unlock();  // throws not_found where either keeper's hold already ran out
}

TEST_P(KeeperCoordinationTest, ABarrierWhoseHomeIsLostWhileThePartiesWaitCompletesAtTheNextKeeper) {
  const std::string name = "kc-barrier";
  auto first = make_client();
  auto second = make_client();
  auto third = make_client();
  auto a = std::async(std::launch::async, [&] { first.barrier(name, 3, 30s); });
  auto b = std::async(std::launch::async, [&] { second.barrier(name, 3, 30s); });
  ASSERT_TRUE(waits_reach(third, [](const smb::ServerWaits& w) { return w.barrier_parties >= 2; }));
  server(home_of(name)).kill();
  third.barrier(name, 3, 30s);
  ASSERT_EQ(a.wait_for(10s), std::future_status::ready);
  ASSERT_EQ(b.wait_for(10s), std::future_status::ready);
  a.get();
  b.get();
  // And the next round meets there too.
  auto c = std::async(std::launch::async, [&] { first.barrier(name, 2, 30s); });
  second.barrier(name, 2, 30s);
  ASSERT_EQ(c.wait_for(10s), std::future_status::ready);
  c.get();
}

INSTANTIATE_TEST_SUITE_P(Fabrics, KeeperCoordinationTest, testing::ValuesIn(multi_server_fabrics()), fabric_name);

}  // namespace
