// Buffers with three copies of every stripe (BufferOptions::replicas = 3)
// over 3 real smbd, two of which are killed with SIGKILL: every
// acknowledged write, vector op and atomic survives on the last copy, the
// three copies apply racing ops in one order even while the copy that
// orders them dies (the chain: ordered_ops.cpp), and a repair rebuilds two
// restarted servers' copies at once.
//
// With 3 servers every server holds a copy of every stripe: copy r of the
// stripes at position p lives on server (p + r) mod 3. The two keepers of a
// buffer's record are its home and the server after it (replication_fixture.hpp);
// the tests kill the home last or not at all, so the record stays reachable.
#include "replication_fixture.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <thread>

namespace {

using namespace smb::test;

class ThreeCopiesTest : public ReplicationTest {
 protected:
  static smb::BufferOptions three_copies() {
    auto o = replicated();
    o.replicas = 3;
    return o;
  }
  // The two servers that are not the home of `buffer`'s name, in the order
  // that makes the chain matter: the first holds copy 0 of the position
  // after the home's, the second that position's copy 1, and the home its
  // copy 2. Losing the first makes copy 1 order and copy 2 follow it;
  // losing the second leaves copy 2 alone. The home (a keeper) stays.
  std::array<std::size_t, 2> victims_of(const smb::Buffer& buffer) const {
    const auto& servers = buffer.layout().servers;
    const auto home = addresses()[home_of(buffer.layout().name)];
    const auto at = static_cast<std::size_t>(std::find(servers.begin(), servers.end(), home) - servers.begin());
    return {index_of(servers[(at + 1) % 3]), index_of(servers[(at + 2) % 3])};
  }
  // A name that starts with `base` and has `like`'s keepers (a test that
  // kills two servers keeps one keeper of every buffer it reads anew).
  std::string name_homed_with(const std::string& base, const std::string& like) const {
    for (int i = 0;; ++i)
      if (const auto name = base + std::to_string(i); home_of(name) == home_of(like)) return name;
  }
  // Reads `name` from a new client and from `holder`: both must give `want`.
  void expect_bytes(smb::Buffer& holder, const std::string& name, const ByteVec& want, const std::string& after) {
    ByteVec got(want.size());
    holder.read(0, got);
    EXPECT_TRUE(same_bytes(want, got)) << "the holder's read " << after;
    auto later = fresh_client();
    auto reopened = later.open(name);
    ByteVec seen(want.size());
    reopened.read(0, seen);
    EXPECT_TRUE(same_bytes(want, seen)) << "a new client's read " << after;
  }
};

TEST_P(ThreeCopiesTest, TheLayoutKeepsThreeCopiesAndFourAreRefused) {
  auto client = make_client();
  auto buffer = client.create("r3", 3 * kUnit, three_copies());
  EXPECT_EQ(buffer.layout().replicas, 3u);
  auto again = fresh_client().open("r3");
  EXPECT_EQ(again.layout().replicas, 3u) << "the record keeps the count";
  auto four = three_copies();
  four.replicas = 4;
  expect_error([&] { client.create("r4", 3 * kUnit, four); }, smb::Errc::invalid_argument, "1 to 3");
  const auto bench = run_bench({"--op", "write", "--name", "r3b", "--size", "96K", "--stripe-unit", "4K",
                                "--replicas", "3", "--verify", "--keep"});
  EXPECT_EQ(bench.status.code, 0) << bench.describe();
  const auto info = json_of(run_smbctl({"--json", "info", "r3b"}));
  EXPECT_EQ(info.value("replicas", 0), 3) << info.dump();
}

// A writer, an accumulator and a fetch-adder run while two servers are
// killed one after the other: no op fails, and the last copy holds the last
// acknowledged write and exactly the acknowledged count of each op.
TEST_P(ThreeCopiesTest, NoAcknowledgedOpIsLostWhenTwoServersAreKilled) {
  auto writer_client = make_client();
  auto adder_client = make_client();
  auto counter_client = make_client();
  constexpr std::uint64_t kCount = 3 * kUnit / sizeof(double);  // a stripe on each server
  const auto mixed = name_homed_with("mixed", "sums");
  auto data = writer_client.create(mixed, 3 * kUnit * 4, three_copies());
  auto sums = adder_client.create("sums", kCount * sizeof(double), three_copies());
  sums.write(0, doubles(std::vector<double>(kCount, 0.0)));
  const auto ones = doubles(std::vector<double>(kCount, 1.0));
  constexpr std::array<std::uint64_t, 3> kWords{0, kUnit, 2 * kUnit};  // counted by fetch-add, one per position
  auto plain = counter_client.create(name_homed_with("words", "sums"), 3 * kUnit, three_copies());

  std::atomic<bool> stop{false};
  std::atomic<int> writes{0}, adds{0}, fetches{0};
  std::string errors;
  std::mutex errors_mutex;
  auto guarded = [&](const char* who, auto body) {
    return std::thread([&, who, body] {
      try {
        body();
      } catch (const smb::Error& e) {
        std::lock_guard lock(errors_mutex);
        errors += std::string(who) + ": " + e.what() + "\n";
      }
    });
  };
  auto writer = guarded("writer", [&] {
    for (int i = 1; !stop; ++i) {
      data.write(0, pattern_bytes(0, data.size(), static_cast<std::uint8_t>(i)));
      writes = i;
    }
  });
  auto adder = guarded("accumulator", [&] {
    while (!stop) {
      sums.apply(smb::VectorOp::accumulate, smb::DType::f64, 0, kCount, 1.0, ones);
      ++adds;
    }
  });
  auto fetcher = guarded("fetch-adder", [&] {
    while (!stop) {
      for (const auto at : kWords)
        if (const auto old = plain.fetch_add(at, 1); old != static_cast<std::uint64_t>(fetches.load()))
          throw smb::Error(smb::Errc::internal, "the word at " + std::to_string(at) + " was " + std::to_string(old) +
                                                    " after " + std::to_string(fetches.load()) + " fetch-adds");
      ++fetches;
    }
  });
  const auto progress = [&](int more) {
    const int w = writes + more, a = adds + more, f = fetches + more;
    for (int i = 0; i < 3000 && (writes < w || adds < a || fetches < f); ++i) {
      {
        std::lock_guard lock(errors_mutex);
        if (!errors.empty()) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  };
  progress(20);
  const auto [first, second] = victims_of(sums);
  server(first).kill();
  progress(20);  // ops go on with two copies
  server(second).kill();
  const auto before_last = adds.load();
  progress(20);  // and with one
  stop = true;
  writer.join();
  adder.join();
  fetcher.join();
  ASSERT_TRUE(errors.empty()) << "an op failed with a copy left:\n" << errors;
  EXPECT_GT(adds.load(), before_last) << "no accumulate completed after the second kill";

  expect_bytes(data, mixed, pattern_bytes(0, data.size(), static_cast<std::uint8_t>(writes.load())),
               "of the last acknowledged write, after two kills");
  expect_values(sums, "sums", std::vector<double>(kCount, static_cast<double>(adds.load())),
                "of the acknowledged accumulates, after two kills");
  for (const auto at : kWords) EXPECT_EQ(plain.fetch_add(at, 0), static_cast<std::uint64_t>(fetches.load()));
}

// Two clients race ops whose result depends on their order (x + 1 and -x)
// and compare-swap increments while the server that orders some of them
// (copy 0 of its position) is killed: copy 1 takes over the order, and
// copy 2 must follow it. Then the next server goes, and the reads, now from
// each position's last copy, must not change.
TEST_P(ThreeCopiesTest, TheCopiesKeepOneOrderWhileTheOrderingCopyDies) {
  auto a = make_client();
  auto b = make_client();
  constexpr std::uint64_t kCount = 3 * kUnit / sizeof(double);
  auto xa = a.create("order", kCount * sizeof(double), three_copies());
  auto xb = b.open("order");
  xa.write(0, doubles(std::vector<double>(kCount, 0.5)));
  const auto race_name = name_homed_with("race", "order");
  auto wa = a.create(race_name, 3 * kUnit, three_copies());
  auto wb = b.open(race_name);
  const std::array<std::uint64_t, 3> words{8, kUnit + 16, 2 * kUnit + 24};  // one per position
  const auto ones = doubles(std::vector<double>(kCount, 1.0));
  constexpr int kRounds = 200;
  std::atomic<int> rounds{0};
  auto race = [&](smb::Buffer& x, smb::Buffer& w, bool adds) {
    for (int i = 0; i < kRounds; ++i) {
      if (adds)
        x.apply(smb::VectorOp::accumulate, smb::DType::f64, 0, kCount, 1.0, ones);
      else
        x.apply(smb::VectorOp::scale, smb::DType::f64, 0, kCount, -1.0);
      for (const auto at : words) {
        std::uint64_t guess = w.fetch_add(at, 0);
        for (;;) {  // an increment by compare-swap, retried until it finds the word as it guessed
          const std::uint64_t old = w.compare_swap(at, guess, guess + 1);
          if (old == guess) break;
          guess = old;
        }
      }
      ++rounds;
    }
  };
  std::string other_error;
  std::thread other([&] {
    try {
      race(xb, wb, false);
    } catch (const smb::Error& e) {
      other_error = e.what();
    }
  });
  const auto [first, second] = victims_of(xa);
  std::thread killer([&] {
    for (int i = 0; i < 2000 && rounds < kRounds / 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    server(first).kill();  // mid-race: copy 0 of its position dies
  });
  race(xa, wa, true);
  killer.join();
  other.join();
  ASSERT_TRUE(other_error.empty()) << other_error;

  ByteVec before(kCount * sizeof(double));
  xa.read(0, before);
  for (const auto at : words) EXPECT_EQ(wa.fetch_add(at, 0), 2u * kRounds) << "the word at " << at;
  // Now each position is read from the copy after the one read above.
  server(second).kill();
  ByteVec after(kCount * sizeof(double));
  xb.read(0, after);
  EXPECT_TRUE(same_bytes(before, after)) << "two copies applied the racing ops in different orders";
  for (const auto at : words) {
    std::uint64_t word = 0;
    wb.read(at, std::as_writable_bytes(std::span(&word, 1)));
    EXPECT_EQ(word, 2u * kRounds) << "the last copy of the word at " << at;
  }
}

// Two servers restart empty at once; one repair rebuilds both their copies
// from the one left, and the buffer then survives losing that one.
TEST_P(ThreeCopiesTest, ARepairRebuildsTwoRestartedServersAtOnce) {
  const std::uint64_t size = 3 * kUnit * 5 + 200;
  const auto count = size / sizeof(double);
  std::vector<double> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<double>(i) * 0.25;
  auto client = make_client();
  auto buffer = client.create("kt", size, three_copies());
  buffer.write(0, doubles(values));
  const auto [first, second] = victims_of(buffer);
  restart_server(first);
  restart_server(second);
  buffer.apply(smb::VectorOp::accumulate, smb::DType::f64, 0, count, 1.0, doubles(std::vector<double>(count, 1.0)));
  for (auto& v : values) v += 1.0;
  EXPECT_TRUE(state_of("kt").starts_with("degraded")) << state_of("kt");

  const auto repair = run_smbctl({"--json", "repair", "kt"});
  ASSERT_EQ(repair.status.code, 0) << repair.describe();
  const auto doc = json_of(repair);
  ASSERT_EQ(doc["buffers"].size(), 1u) << repair.out;
  const auto& report = doc["buffers"][0];
  EXPECT_EQ(report.value("result", ""), "repaired") << repair.out;
  EXPECT_EQ(report["repaired"].size(), 6u) << "each restarted server held a copy of every position\n" << repair.out;
  EXPECT_EQ(state_of("kt"), "ok");

  buffer.apply(smb::VectorOp::scale, smb::DType::f64, 0, count, 2.0);
  for (auto& v : values) v *= 2.0;
  // The home, whose copies were the repair's source, goes: every stripe is
  // now read from a rebuilt copy.
  server(home_of("kt")).kill();
  ByteVec got(size);
  buffer.read(0, got);
  EXPECT_EQ(as_doubles(got), values) << "the rebuilt copies, after the source's loss";
  buffer.apply(smb::VectorOp::accumulate, smb::DType::f64, 0, count, 1.0, doubles(std::vector<double>(count, 1.0)));
  for (auto& v : values) v += 1.0;
  server(second).kill();  // and then one of the two rebuilt servers
  buffer.read(0, got);
  EXPECT_EQ(as_doubles(got), values) << "the last rebuilt copy";
}

INSTANTIATE_TEST_SUITE_P(Fabrics, ThreeCopiesTest, testing::ValuesIn(multi_server_fabrics()), fabric_name);

}  // namespace
