// 64-bit atomics on buffer words: fetch-add from many threads (and clients)
// loses no update and hands out every old value exactly once; compare-swap
// swaps only on a match and always returns the old value.
#include "data.hpp"
#include "fabric.hpp"
#include "process.hpp"
#include "scoped_env.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <span>
#include <thread>

namespace {

using namespace smb::test;

class AtomicsTest : public FabricTest {
 protected:
  static constexpr int kThreads = 4;
  static constexpr std::uint64_t kAddsPerThread = 300;
  static constexpr std::uint64_t kUnit = 4096;
  // One counter in each of the first three stripes (servers 0, 1, 2 when
  // there are three), not at the start of its stripe.
  static constexpr std::uint64_t kCounters[] = {8, kUnit + 16, 2 * kUnit + 24};

  smb::Buffer make_counters(smb::Client& client) {
    smb::BufferOptions o;
    o.stripe_unit = kUnit;
    auto buffer = client.create("counters", 3 * kUnit, o);
    buffer.write(0, ByteVec(3 * kUnit));
    return buffer;
  }

  std::uint64_t word(smb::Buffer& buffer, std::uint64_t offset) {
    ByteVec bytes(8);
    buffer.read(offset, bytes);
    return load_u64(bytes);
  }

  // Thread t adds 1 to counter i % 3 on its i-th step, recording old values.
  static std::string add_loop(smb::Buffer& buffer, std::vector<std::uint64_t> (&olds)[3]) {
    try {
      for (std::uint64_t i = 0; i < kAddsPerThread; ++i) olds[i % 3].push_back(buffer.fetch_add(kCounters[i % 3], 1));
    } catch (const std::exception& e) {
      return e.what();
    }
    return {};
  }

  // Every counter ends at its number of adds, and its old values are exactly
  // 0..adds-1: no update lost, none applied twice.
  void check_counters(smb::Buffer& buffer, std::vector<std::vector<std::uint64_t>>& olds_per_counter) {
    for (int c = 0; c < 3; ++c) {
      auto& olds = olds_per_counter[static_cast<std::size_t>(c)];
      const std::uint64_t adds = olds.size();
      EXPECT_EQ(word(buffer, kCounters[c]), adds) << "counter " << c;
      std::sort(olds.begin(), olds.end());
      for (std::uint64_t i = 0; i < adds; ++i)
        if (olds[i] != i) {
          ADD_FAILURE() << "counter " << c << ": the old values returned are not exactly 0.." << adds - 1
                        << " (sorted, position " << i << " holds " << olds[i] << ")";
          break;
        }
    }
  }

  void run_threads(bool client_per_thread) {
    auto client = make_client();
    auto buffer = make_counters(client);
    std::vector<std::uint64_t> olds[kThreads][3];
    std::vector<std::string> errors(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        const auto ti = static_cast<std::size_t>(t);
        try {
          if (!client_per_thread) {
            errors[ti] = add_loop(buffer, olds[ti]);
            return;
          }
          auto own = make_client();
          auto mine = own.open("counters");
          errors[ti] = add_loop(mine, olds[ti]);
        } catch (const std::exception& e) {
          errors[ti] = e.what();
        }
      });
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) ASSERT_EQ(errors[static_cast<std::size_t>(t)], "") << "thread " << t;
    std::vector<std::vector<std::uint64_t>> merged(3);
    for (auto& per_thread : olds)
      for (int c = 0; c < 3; ++c)
        merged[static_cast<std::size_t>(c)].insert(merged[static_cast<std::size_t>(c)].end(), per_thread[c].begin(),
                                                   per_thread[c].end());
    std::uint64_t total = 0;
    for (auto& m : merged) total += m.size();
    EXPECT_EQ(total, kThreads * kAddsPerThread);
    check_counters(buffer, merged);
  }
};

TEST_P(AtomicsTest, FetchAddFromThreadsSharingAClientSumsExactly) { run_threads(false); }

TEST_P(AtomicsTest, FetchAddFromAClientPerThreadSumsExactly) { run_threads(true); }

TEST_P(AtomicsTest, FetchAddReturnsTheOldValueAndWraps) {
  auto client = make_client();
  auto buffer = make_counters(client);
  EXPECT_EQ(buffer.fetch_add(kCounters[1], 5), 0u);
  EXPECT_EQ(buffer.fetch_add(kCounters[1], 7), 5u);
  EXPECT_EQ(word(buffer, kCounters[1]), 12u);
  EXPECT_EQ(buffer.fetch_add(kCounters[1], ~std::uint64_t{0}), 12u);  // adding 2^64-1 subtracts 1
  EXPECT_EQ(word(buffer, kCounters[1]), 11u);
  EXPECT_EQ(word(buffer, kCounters[1] + 8), 0u) << "the neighbouring word was touched";
}

TEST_P(AtomicsTest, CompareSwapSwapsOnlyOnAMatch) {
  auto client = make_client();
  auto buffer = make_counters(client);
  const auto at = kCounters[2];
  EXPECT_EQ(buffer.compare_swap(at, 0, 42), 0u) << "match: returns the old value";
  EXPECT_EQ(word(buffer, at), 42u);
  EXPECT_EQ(buffer.compare_swap(at, 7, 99), 42u) << "mismatch: returns the current value";
  EXPECT_EQ(word(buffer, at), 42u) << "mismatch must not write";
  EXPECT_EQ(buffer.compare_swap(at, 42, 0xFFFFFFFFFFFFFFFFull), 42u);
  EXPECT_EQ(buffer.fetch_add(at, 0), 0xFFFFFFFFFFFFFFFFull);
  // A plain write is seen by compare-swap, and vice versa.
  buffer.write(at, u64_bytes(0x1122334455667788ull));
  EXPECT_EQ(buffer.compare_swap(at, 0x1122334455667788ull, 1), 0x1122334455667788ull);
  EXPECT_EQ(word(buffer, at), 1u);
}

TEST_P(AtomicsTest, CompareSwapLoopsFromThreadsLoseNoUpdate) {
  auto client = make_client();
  auto buffer = make_counters(client);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        for (std::uint64_t i = 0; i < kAddsPerThread / 3; ++i) {
          std::uint64_t seen = buffer.compare_swap(kCounters[0], 0, 0);  // read atomically
          for (;;) {
            const std::uint64_t old = buffer.compare_swap(kCounters[0], seen, seen + 1);
            if (old == seen) break;
            seen = old;
          }
        }
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(t)] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) ASSERT_EQ(errors[static_cast<std::size_t>(t)], "") << "thread " << t;
  EXPECT_EQ(word(buffer, kCounters[0]), kThreads * (kAddsPerThread / 3));
}

// Four processes fetch-add on the buffer's first words while this one runs
// server-side accumulates on the rest of the same buffer: every add counts.
TEST_P(AtomicsTest, FetchAddsFromFourProcessesAndAccumulatesOnOneBufferStayExact) {
  constexpr std::uint64_t kWords = 64, kAdds = 400, kPasses = 100, kElements = 2048;
  auto client = make_client();
  smb::BufferOptions o;
  o.stripe_unit = kUnit;
  auto buffer = client.create("mixed", kWords * 8 + kElements * 8, o);
  buffer.write(0, ByteVec(kWords * 8 + kElements * 8));
  std::vector<pid_t> adders;
  for (int p = 0; p < 4; ++p)
    adders.push_back(spawn(smb_bench_path(),
                           {"--servers", server_list(), "--name", "mixed", "--op", "fetch-add", "--size",
                            std::to_string(kWords * 8), "--iters", std::to_string(kAdds)},
                           -1, -1));
  const std::vector<std::int64_t> ones(kElements, 1);
  for (std::uint64_t i = 0; i < kPasses; ++i)
    buffer.apply(smb::VectorOp::accumulate, smb::DType::i64, kWords * 8, kElements, 1.0,
                 std::as_bytes(std::span<const std::int64_t>(ones)));
  for (pid_t pid : adders) {
    const auto status = wait_for_exit(pid, std::chrono::seconds(60));
    ASSERT_TRUE(status && status->success()) << "a fetch-add process: " << (status ? status->describe() : "hung");
  }
  std::uint64_t sum = 0;
  for (std::uint64_t w = 0; w < kWords; ++w) sum += word(buffer, w * 8);
  EXPECT_EQ(sum, 4 * kAdds) << "fetch-adds from 4 processes lost or gained an update";
  ByteVec rest(kElements * 8);
  buffer.read(kWords * 8, rest);
  for (std::uint64_t e = 0; e < kElements; ++e)
    ASSERT_EQ(load_u64(std::span<const std::byte>(rest).subspan(e * 8, 8)), kPasses) << "element " << e;
}

// On one host a client's fetch-adds are the CPU's own atomic instruction on
// the server's memory (UCX's shared-memory atomic lanes); a client that
// reaches the server over TCP gets them done by the server's CPU. Both kinds
// on the same words: every add counts, and the two really took those paths.
TEST_P(AtomicsTest, SharedMemoryAndServerAtomicsOnTheSameWordsStayExact) {
  if (GetParam().label != "ucx_shm") GTEST_SKIP() << "needs UCX's shared-memory fabric (this is " << GetParam().label << ")";
  constexpr std::uint64_t kWords = 16, kAdds = 2000;
  auto client = make_client();
  auto buffer = client.create("both-paths", kWords * 8);
  buffer.write(0, ByteVec(kWords * 8));
  struct Adder {
    pid_t pid;
    std::string out_path;
  };
  std::vector<Adder> adders;
  for (const char* tls : {"", "tcp,self", "", "tcp,self"}) {
    ScopedEnv env;
    if (*tls != '\0') env.set("UCX_TLS", tls);
    const std::string out_path = testing::TempDir() + "smb-adder-" + std::to_string(::getpid()) + "-" +
                                 std::to_string(adders.size()) + ".json";
    const int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(fd, 0) << out_path;
    adders.push_back({spawn(smb_bench_path(),
                            {"--servers", server_list(), "--name", "both-paths", "--op", "fetch-add", "--size",
                             std::to_string(kWords * 8), "--iters", std::to_string(kAdds), "--json"},
                            fd, -1),
                      out_path});
    ::close(fd);
  }
  std::vector<std::string> paths;
  for (const auto& adder : adders) {
    const auto status = wait_for_exit(adder.pid, std::chrono::seconds(60));
    ASSERT_TRUE(status && status->success()) << "a fetch-add process: " << (status ? status->describe() : "hung");
    std::ifstream in(adder.out_path);
    paths.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    std::remove(adder.out_path.c_str());
  }
  EXPECT_NE(paths[0].find("atomics rma"), std::string::npos) << "shared memory: " << paths[0];
  EXPECT_NE(paths[1].find("atomics am"), std::string::npos) << "tcp: " << paths[1];
  std::uint64_t sum = 0;
  for (std::uint64_t w = 0; w < kWords; ++w) sum += word(buffer, w * 8);
  EXPECT_EQ(sum, 4 * kAdds) << "shared-memory and server-side fetch-adds on the same words lost an update";
}

// UCX_TLS=sm,self (what users set to force shared memory) leaves no
// transport with peer-failure detection: the client still works, on shared
// memory alone, with native atomics and calls.
TEST_P(AtomicsTest, UcxRestrictedToSharedMemoryStillWorks) {
  if (GetParam().label != "ucx_shm") GTEST_SKIP() << "needs UCX's shared-memory fabric (this is " << GetParam().label << ")";
  ScopedEnv env;
  env.set("UCX_TLS", "sm,self");
  for (const std::vector<std::string>& op : {std::vector<std::string>{"--op", "write", "--size", "1M", "--block", "64K", "--verify"},
                                             {"--op", "fetch-add", "--size", "4K", "--iters", "500", "--verify"},
                                             {"--op", "accumulate", "--size", "4K", "--block", "4K", "--iters", "100"}}) {
    std::vector<std::string> args{"--servers", server_list()};
    args.insert(args.end(), op.begin(), op.end());
    const auto run = run_tool(smb_bench_path(), args);
    ASSERT_TRUE(run.status.success()) << op[1] << ": " << run.describe();
    EXPECT_NE(run.out.find("atomics rma"), std::string::npos) << op[1] << ": " << run.out;
  }
}

INSTANTIATE_TEST_SUITE_P(Fabrics, AtomicsTest, testing::ValuesIn(all_fabrics()), fabric_name);

}  // namespace
