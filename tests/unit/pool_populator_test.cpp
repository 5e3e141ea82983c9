// PoolPopulator: faults the whole pool in behind the daemon's back, and
// steps aside while foreground work (a repair's pull) holds the pool.
#include "memory_pool.hpp"
#include "pool_populator.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

namespace {

using smb::server::MemoryPool;
using smb::server::PoolPopulator;
using namespace std::chrono_literals;

constexpr std::uint64_t kPoolBytes = 64ull << 20;

// Waits for the populator's `done`, at most `limit`.
struct DoneSignal {
  std::mutex mutex;
  std::condition_variable cv;
  std::optional<std::string> error;
  void set(const std::string& e) {
    std::lock_guard lock(mutex);
    error = e;
    cv.notify_all();
  }
  bool wait(std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex);
    return cv.wait_for(lock, limit, [&] { return error.has_value(); });
  }
};

TEST(PoolPopulator, FaultsTheWholePoolIn) {
  MemoryPool pool(kPoolBytes);
  DoneSignal done;
  PoolPopulator populator(pool, [&](std::chrono::milliseconds, const std::string& error) { done.set(error); });
  ASSERT_TRUE(done.wait(30s)) << "the populator did not finish 64 MiB in 30 s";
  EXPECT_EQ(*done.error, "");
  EXPECT_EQ(pool.populated(), pool.size());
}

TEST(PoolPopulator, StepsAsideWhileForegroundWorkHoldsThePool) {
  MemoryPool pool(kPoolBytes);
  DoneSignal done;
  std::optional<MemoryPool::Foreground> pull;
  pull.emplace(pool);  // before the populator starts: it must not fault a single chunk in
  PoolPopulator populator(pool, [&](std::chrono::milliseconds, const std::string& error) { done.set(error); });
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(pool.populated(), 0u) << "the populator went on beside the pull";
  EXPECT_FALSE(done.error.has_value());
  pull.reset();
  ASSERT_TRUE(done.wait(30s)) << "the populator did not go on once the pull ended";
  EXPECT_EQ(pool.populated(), pool.size());
}

TEST(PoolPopulator, AStopWhileSteppingAsideEndsWithoutDone) {
  MemoryPool pool(kPoolBytes);
  DoneSignal done;
  const MemoryPool::Foreground pull(pool);
  {
    PoolPopulator populator(pool, [&](std::chrono::milliseconds, const std::string& error) { done.set(error); });
    std::this_thread::sleep_for(20ms);
  }  // the destructor stops and joins it while it waits for the pull
  EXPECT_FALSE(done.error.has_value());
  EXPECT_EQ(pool.populated(), 0u);
}

}  // namespace
