// Replicated buffers (BufferOptions::replicas = 2) against real smbd
// processes, one of which is killed with SIGKILL: every acknowledged write
// and vector op survives, reads fail over, the copies apply ops in one order,
// and a buffer whose every copy of some stripes is gone says so.
#include "replication_fixture.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <atomic>
#include <thread>

namespace {

using namespace smb::test;

TEST_P(ReplicationTest, ReadsFailOverAndWritesGoOnWhenAServerIsKilled) {
  auto client = make_client();
  const std::uint64_t size = 3 * kUnit * 5 + 123;  // uneven shares, a partial last stripe
  auto buffer = client.create("kt", size, replicated());
  EXPECT_EQ(buffer.layout().replicas, 2u);
  buffer.write(0, pattern_bytes(0, size));
  const auto victim = not_home_of("kt");
  server(victim).kill();

  ByteVec got(size);
  buffer.read(0, got);
  EXPECT_TRUE(holds_pattern(got, 0)) << "read with a server gone";
  buffer.write(kUnit / 2, pattern_bytes(kUnit / 2, size - kUnit, 0x5a));  // every stripe, over the gap
  auto expected = pattern_bytes(0, size);
  const auto rewritten = pattern_bytes(kUnit / 2, size - kUnit, 0x5a);
  std::copy(rewritten.begin(), rewritten.end(), expected.begin() + kUnit / 2);
  buffer.read(0, got);
  EXPECT_TRUE(same_bytes(expected, got)) << "write with a server gone";

  // The operator sees which copies are gone, and that none is lost.
  const auto info = run_smbctl({"--json", "info", "kt"});
  EXPECT_EQ(info.status.code, 3) << "degraded\n" << info.describe();
  const auto doc = nlohmann::json::parse(info.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << info.describe();
  EXPECT_EQ(doc.value("replicas", 0), 2);
  EXPECT_TRUE(doc.value("state", "").starts_with("degraded")) << info.out;
  int degraded = 0;
  for (const auto& stripe : doc.value("stripes", nlohmann::json::array())) {
    degraded += stripe.value("state", "") == "degraded";
    EXPECT_NE(stripe.value("state", ""), "lost") << stripe.dump();
  }
  EXPECT_EQ(degraded, 2) << "the killed server held copy 0 of one position and copy 1 of another\n" << info.out;
  const auto table = run_smbctl({"info", "kt"});
  EXPECT_TRUE(mentions(table.out, "COPY 1")) << table.out;
  EXPECT_TRUE(mentions(table.out, server(victim).address() + " unreachable")) << table.out;

  // A client that starts with the server down opens the buffer and reads it.
  auto other = fresh_client();
  auto again = other.open("kt");
  ByteVec seen(size);
  again.read(0, seen);
  EXPECT_TRUE(same_bytes(expected, seen)) << "a fresh client's read";
}

TEST_P(ReplicationTest, NoAcknowledgedWriteOrAccumulateIsLostUnderAKill) {
  auto writer_client = make_client();
  auto adder_client = make_client();
  constexpr std::uint64_t kCount = 3 * kUnit / sizeof(double);  // a stripe on each server
  auto data = writer_client.create("mixed", 3 * kUnit * 4, replicated());
  auto sums = adder_client.create("sums", kCount * sizeof(double), replicated());
  sums.write(0, doubles(std::vector<double>(kCount, 0.0)));
  const auto ones = doubles(std::vector<double>(kCount, 1.0));

  std::atomic<bool> stop{false};
  std::atomic<int> writes{0}, adds{0};
  std::string writer_error, adder_error;
  std::thread writer([&] {
    try {
      for (int i = 1; !stop; ++i) {
        data.write(0, pattern_bytes(0, data.size(), static_cast<std::uint8_t>(i)));
        writes = i;
      }
    } catch (const smb::Error& e) {
      writer_error = e.what();
    }
  });
  std::thread adder([&] {
    try {
      while (!stop) {
        sums.apply(smb::VectorOp::accumulate, smb::DType::f64, 0, kCount, 1.0, ones);
        ++adds;
      }
    } catch (const smb::Error& e) {
      adder_error = e.what();
    }
  });
  const auto wait_for = [&](int w, int a) {
    for (int i = 0; i < 2000 && (writes < w || adds < a) && writer_error.empty() && adder_error.empty(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  };
  wait_for(20, 20);
  const auto killed_after = adds.load();
  server(not_home_of("sums")).kill();
  wait_for(writes + 20, adds + 20);  // ops go on after the kill
  stop = true;
  writer.join();
  adder.join();
  ASSERT_TRUE(writer_error.empty()) << "a write failed with a copy left: " << writer_error;
  ASSERT_TRUE(adder_error.empty()) << "an accumulate failed with a copy left: " << adder_error;
  EXPECT_GT(adds.load(), killed_after) << "no accumulate completed after the kill";

  ByteVec got(data.size());
  data.read(0, got);
  EXPECT_TRUE(same_bytes(pattern_bytes(0, data.size(), static_cast<std::uint8_t>(writes.load())), got))
      << "the last acknowledged write (" << writes << ")";
  ByteVec total(kCount * sizeof(double));
  sums.read(0, total);
  for (double v : as_doubles(total)) ASSERT_EQ(v, static_cast<double>(adds.load())) << "acknowledged accumulates";
  // What a client that starts now reads: the survivors' copies.
  auto other = fresh_client();
  auto reopened = other.open("sums");
  reopened.read(0, total);
  for (double v : as_doubles(total)) ASSERT_EQ(v, static_cast<double>(adds.load())) << "read by a fresh client";
}

// Two clients race ops whose result depends on their order (x + 1 and -x):
// both copies must end equal, i.e. have applied them in the same order.
TEST_P(ReplicationTest, CopiesApplyRacingVectorOpsInOneOrder) {
  auto a = make_client();
  auto b = make_client();
  constexpr std::uint64_t kCount = 3 * kUnit / sizeof(double);
  auto xa = a.create("order", kCount * sizeof(double), replicated());
  auto xb = b.open("order");
  xa.write(0, doubles(std::vector<double>(kCount, 0.5)));
  const auto ones = doubles(std::vector<double>(kCount, 1.0));
  std::thread adder([&] {
    for (int i = 0; i < 300; ++i) xa.apply(smb::VectorOp::accumulate, smb::DType::f64, 0, kCount, 1.0, ones);
  });
  for (int i = 0; i < 300; ++i) xb.apply(smb::VectorOp::scale, smb::DType::f64, 0, kCount, -1.0);
  adder.join();
  ByteVec before(kCount * sizeof(double));
  xa.read(0, before);  // copy 0 of every stripe
  // (Stripes on different servers saw the race in different orders: each
  // server orders its own part, as without copies.)

  // The stripes whose copy 0 was on the killed server are read from copy 1.
  server(not_home_of("order")).kill();
  ByteVec after(kCount * sizeof(double));
  xa.read(0, after);
  EXPECT_TRUE(same_bytes(before, after)) << "a copy applied the racing ops in another order";
}

TEST_P(ReplicationTest, ABufferWithEveryCopyOfAStripeGoneIsLost) {
  auto client = make_client();
  auto buffer = client.create("both", 3 * kUnit, replicated());
  buffer.write(0, pattern_bytes(0, buffer.size()));
  const auto home = home_of("both");
  // Kill the two servers that are not its home: some stripe had both copies on them.
  for (std::size_t i = 0; i < 3; ++i)
    if (i != home) server(i).kill();
  ByteVec got(buffer.size());
  expect_error([&] { buffer.read(0, got); }, smb::Errc::server_gone, "no copy");
  auto other = fresh_client();
  expect_error([&] { other.open("both"); }, smb::Errc::data_lost, "every copy of its stripes");
}

TEST_P(ReplicationTest, ReplicasAreCheckedAndAtomicsGoOnAfterAKill) {
  auto client = make_client();
  smb::BufferOptions four = replicated();
  four.replicas = 4;  // more than kMaxReplicas and than the servers
  expect_error([&] { client.create("r4", 3 * kUnit, four); }, smb::Errc::invalid_argument, "replicas");
  four.replicas = 0;
  expect_error([&] { client.create("r0", 3 * kUnit, four); }, smb::Errc::invalid_argument, "replicas");
  auto buffer = client.create("words", 3 * kUnit, replicated());
  EXPECT_EQ(buffer.fetch_add(8, 5), 0u);
  EXPECT_EQ(buffer.fetch_add(8, 2), 5u);
  EXPECT_EQ(buffer.compare_swap(8, 6, 1), 7u) << "mismatch: the current word, no swap";
  EXPECT_EQ(buffer.compare_swap(8, 7, 1), 7u) << "match: swapped";
  expect_error([&] { buffer.compare_swap(12, 0, 1); }, smb::Errc::invalid_argument, "aligned");
  server(not_home_of("words")).kill();
  EXPECT_EQ(buffer.fetch_add(8, 1), 1u) << "the survivors' copy of the word";
  EXPECT_EQ(buffer.compare_swap(8, 2, 40), 2u);
  EXPECT_EQ(buffer.fetch_add(8, 0), 40u);
}

// Two clients race compare-swap increments and fetch-adds on one word of
// each position. Every copy must take them in one order: a swap that
// succeeded on one copy and failed on the other would leave the copies
// apart, and losing copy 0 would then change the count.
TEST_P(ReplicationTest, CopiesTakeRacingAtomicsInOneOrder) {
  auto a = make_client();
  auto b = make_client();
  auto wa = a.create("race", 3 * kUnit, replicated());
  auto wb = b.open("race");
  constexpr int kRounds = 150;
  const std::array<std::uint64_t, 3> words{8, kUnit + 16, 2 * kUnit + 24};  // one per position
  auto race = [&](smb::Buffer& buffer) {
    for (int i = 0; i < kRounds; ++i)
      for (const auto at : words) {
        std::uint64_t guess = buffer.fetch_add(at, 1) + 1;
        // An increment by compare-swap: retried until it finds the word as it guessed.
        for (;;) {
          const std::uint64_t old = buffer.compare_swap(at, guess, guess + 1);
          if (old == guess) break;
          guess = old;
        }
      }
  };
  std::thread other([&] { race(wb); });
  race(wa);
  other.join();
  const std::uint64_t each = 2 * 2 * kRounds;  // two clients, two increments a round
  for (const auto at : words) EXPECT_EQ(wa.fetch_add(at, 0), each) << "copy 0 of the word at " << at;
  // One position's copy 0 goes: its word is now read from copy 1.
  server(not_home_of("race")).kill();
  for (const auto at : words) {
    std::uint64_t word = 0;
    wb.read(at, std::as_writable_bytes(std::span(&word, 1)));
    EXPECT_EQ(word, each) << "the surviving copies of the word at " << at;
    EXPECT_EQ(wb.compare_swap(at, word, word + 1), word) << "and they take swaps";
  }
}

// A new process that lists every server (as SMB_SERVERS does) opens a
// replicated buffer while one of them is down, reads the copies that are
// left, and writes: the copies it cannot reach are recorded stale for every
// client, so after a repair brings their server back nothing it wrote is
// missing. Before, such a client failed at connect ("Connection refused")
// unless it set tolerate_unreachable (C++ only).
TEST_P(ReplicationTest, NewProcessesOpenAReplicatedBufferWhileAServerIsDown) {
  const std::vector<std::string> kept{"--name", "kept", "--size", "3M", "--verify"};
  auto write = kept;
  write.insert(write.end(), {"--op", "write", "--replicas", "2", "--stripe-unit", "256K", "--keep"});
  const auto wrote = run_bench(write);
  ASSERT_TRUE(wrote.status.success()) << wrote.describe();
  const auto victim = not_home_of("kept");
  const auto gone = server(victim).address();
  server(victim).kill();

  auto read = kept;
  read.insert(read.end(), {"--op", "read"});
  const auto bench = run_bench(read);  // a new process, every server on its list
  EXPECT_TRUE(bench.status.success()) << bench.describe();
  const auto info = run_smbctl({"info", "kept"});
  EXPECT_EQ(info.status.code, 3) << "degraded, not lost\n" << info.describe();

  // libsmb's default client: it says which server it could not reach.
  smb::Client fresh(client_options());
  ASSERT_EQ(fresh.unreachable_servers().size(), 1u);
  EXPECT_EQ(fresh.unreachable_servers().begin()->first, gone);
  auto buffer = fresh.open("kept");
  ByteVec before(buffer.size());
  buffer.read(0, before);
  auto update = pattern_bytes(100, buffer.size(), 0x3c);
  const auto counters = doubles({1, 2, 3, 4});
  std::copy(counters.begin(), counters.end(), update.begin());
  buffer.write(0, update);
  buffer.apply(smb::VectorOp::accumulate, smb::DType::f64, 0, 4, 1.0, doubles({1, 1, 1, 1}));
  auto expected = update;
  const auto added = doubles({2, 3, 4, 5});
  std::copy(added.begin(), added.end(), expected.begin());
  // What needs the missing server fails at once, naming it.
  smb::BufferOptions there;
  there.servers = {gone};
  expect_error([&] { fresh.create("needs-it", 4096, there); }, smb::Errc::unreachable, gone);

  // Back (empty) and repaired; then losing another server leaves copies
  // rebuilt from the ones the new client wrote.
  restart_server(victim);
  const auto repaired = run_smbctl({"repair", "kept"});
  ASSERT_TRUE(repaired.status.success()) << repaired.describe();
  server(third("kept", victim)).kill();
  ByteVec got(buffer.size());
  fresh_client().open("kept").read(0, got);
  EXPECT_TRUE(same_bytes(expected, got)) << "a write and an accumulate made while the server was down";
}

// A client none of whose servers answers still fails, naming one.
TEST_P(ReplicationTest, AClientThatReachesNoServerFails) {
  auto options = client_options(std::chrono::milliseconds(2000));
  options.servers = {"127.0.0.1:1", "127.0.0.1:2"};
  const auto text = expect_errc(
      smb::Errc::unreachable, [&] { smb::Client c(options); }, "no memory server");
  EXPECT_TRUE(mentions(text, "127.0.0.1:")) << text;
  options.tolerate_unreachable = true;
  smb::Client tolerant(options);  // tools that report a fabric that is down
  EXPECT_EQ(tolerant.unreachable_servers().size(), 2u);
}

INSTANTIATE_TEST_SUITE_P(Fabrics, ReplicationTest, testing::ValuesIn(multi_server_fabrics()), fabric_name);

}  // namespace
