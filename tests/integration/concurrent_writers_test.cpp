// Several threads writing disjoint ranges at the same time, through one
// shared client and through one client each, must not disturb one another:
// afterwards every byte holds what its own writer put there.
#include "data.hpp"
#include "fabric.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>

#include <thread>

namespace {

using namespace smb::test;

class ConcurrentWritersTest : public FabricTest {
 protected:
  static constexpr int kThreads = 4;
  static constexpr std::uint64_t kChunk = 777;           // odd: chunk edges fall anywhere in a stripe
  static constexpr std::uint64_t kPerThread = 40 * kChunk;  // each thread's disjoint range
  static constexpr std::uint64_t kSize = kThreads * kPerThread;

  static smb::BufferOptions small_stripes() {
    smb::BufferOptions o;
    o.stripe_unit = 4096;
    return o;
  }

  // Thread t writes its range chunk by chunk; returns the first error, if any
  // (an exception must not escape a thread: that would abort the test binary).
  static std::string write_range(smb::Buffer& buffer, int t) {
    try {
      const std::uint64_t begin = static_cast<std::uint64_t>(t) * kPerThread;
      for (std::uint64_t off = begin; off < begin + kPerThread; off += kChunk)
        buffer.write(off, pattern_bytes(off, kChunk));
    } catch (const std::exception& e) {
      return e.what();
    }
    return {};
  }
};

TEST_P(ConcurrentWritersTest, ThreadsSharingOneClient) {
  auto client = make_client();
  auto buffer = client.create("shared", kSize, small_stripes());
  buffer.write(0, ByteVec(kSize));  // zeros: a missing chunk cannot pass for the pattern
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] { errors[static_cast<std::size_t>(t)] = write_range(buffer, t); });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[static_cast<std::size_t>(t)], "") << "thread " << t;
  ByteVec got(kSize);
  buffer.read(0, got);
  EXPECT_TRUE(holds_pattern(got, 0));
}

TEST_P(ConcurrentWritersTest, ThreadsWithAClientEach) {
  auto owner = make_client();
  auto buffer = owner.create("shared", kSize, small_stripes());
  buffer.write(0, ByteVec(kSize));
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        auto client = make_client();
        auto mine = client.open("shared");
        errors[static_cast<std::size_t>(t)] = write_range(mine, t);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(t)] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[static_cast<std::size_t>(t)], "") << "thread " << t;
  ByteVec got(kSize);
  buffer.read(0, got);
  EXPECT_TRUE(holds_pattern(got, 0));
}

INSTANTIATE_TEST_SUITE_P(Fabrics, ConcurrentWritersTest, testing::ValuesIn(all_fabrics()), fabric_name);

}  // namespace
