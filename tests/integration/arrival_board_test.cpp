// The arrival board that smb.collective's ranks meet on
// (plugins/collective/arrival_board.hpp): ranks as threads, each with a
// client of its own, over real smbd. Every generation's reduction is exact
// whoever comes last, a rank that comes late wakes the ones asleep, and a
// rank whose metadata differs makes every rank's reduce() say so.
#include "fabric.hpp"

#include <arrival_board.hpp>
#include <smb/client.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <latch>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace smb::test;
using namespace std::chrono_literals;

constexpr std::uint32_t kRanks = 3;
constexpr std::uint64_t kSlotBytes = 256;
constexpr std::size_t kFloats = 4;

class ArrivalBoardTest : public FabricTest {
 protected:
  void SetUp() override {
    FabricTest::SetUp();
    if (IsSkipped()) return;
    auto creator = make_client();
    const std::uint64_t size = smb::python::ArrivalBoard::slots_at(kRanks) + 2 * kRanks * kSlotBytes;
    smb::BufferOptions options;
    options.stripe_unit = (size + 63) / 64 * 64;  // on one server, as fabric.py lays it out
    creator.create("ctl", size, options).write(0, std::vector<std::byte>(size));
  }

  // Runs `body(rank, board)` on kRanks threads, each rank with a client
  // and a board of its own; returns the first failure's text.
  template <typename Body>
  std::string run_ranks(std::chrono::microseconds spin, Body body) {
    std::vector<std::string> failures(kRanks);
    std::vector<std::thread> threads;
    std::latch boards(kRanks);  // every rank's board made (and its mapping said) before any rank starts
    for (std::uint32_t rank = 0; rank < kRanks; ++rank) {
      threads.emplace_back([&, rank] {
        bool counted = false;
        try {
          auto client = make_client();
          auto buffer = client.open("ctl");
          smb::python::ArrivalBoard board(buffer, kRanks, rank, kSlotBytes, spin);
          counted = true;
          boards.arrive_and_wait();
          body(rank, board);
        } catch (const std::exception& e) {
          if (!counted) boards.count_down();  // the others do not wait for a rank that failed
          failures[rank] = "rank " + std::to_string(rank) + ": " + e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& f : failures)
      if (!f.empty()) return f;
    return {};
  }

  static std::vector<float> values(std::uint32_t rank, std::uint64_t generation) {
    std::vector<float> v(kFloats);
    for (std::size_t i = 0; i < kFloats; ++i) v[i] = static_cast<float>(rank + generation + i);
    return v;
  }
};

// 150 generations, a random rank late each time by 0 to 20 ms: the sums are
// exact (the parities never mix), and the late ranks woke sleeping ones
// (over shared memory with a futex, elsewhere through the server).
TEST_P(ArrivalBoardTest, EveryGenerationReducesExactlyWhoeverComesLast) {
  constexpr std::uint64_t kGenerations = 150;
  std::vector<smb::python::ArrivalBoard::Counters> counters(kRanks);
  std::vector<char> maps(kRanks);
  const auto failure = run_ranks(50us, [&](std::uint32_t rank, smb::python::ArrivalBoard& board) {
    std::mt19937 same_everywhere(7);  // every rank draws the same late rank and pause
    const std::string meta = R"({"op":"allreduce"})";
    for (std::uint64_t g = 1; g <= kGenerations; ++g) {
      const auto late = same_everywhere() % kRanks;
      const auto pause = std::chrono::microseconds(same_everywhere() % 4 == 0 ? 20000 : same_everywhere() % 200);
      if (rank == late) std::this_thread::sleep_for(pause);
      const auto mine = values(rank, g);
      std::vector<float> out(kFloats);
      auto outcome = board.allreduce(g, 42, std::as_bytes(std::span(mine)), std::as_bytes(std::span(meta)),
                                     smb::DType::f32, "sum", std::as_writable_bytes(std::span(out)), 1ms);
      while (outcome == smb::python::ArrivalBoard::Outcome::waiting) {
        if (board.wait(0, g, {}, 5s))
          outcome = board.reduce(g, 42, smb::DType::f32, "sum", std::as_writable_bytes(std::span(out)), {})
                        ? smb::python::ArrivalBoard::Outcome::reduced
                        : smb::python::ArrivalBoard::Outcome::mismatch;
        else
          throw std::runtime_error("generation " + std::to_string(g) + ": not everyone within 5 s");
      }
      if (outcome != smb::python::ArrivalBoard::Outcome::reduced)
        throw std::runtime_error("generation " + std::to_string(g) + ": keys differ");
      for (std::size_t i = 0; i < kFloats; ++i) {
        float expected = 0;
        for (std::uint32_t r = 0; r < kRanks; ++r) expected += values(r, g)[i];
        if (out[i] != expected)
          throw std::runtime_error("generation " + std::to_string(g) + ": element " + std::to_string(i) + " is " +
                                   std::to_string(out[i]) + ", not " + std::to_string(expected));
      }
    }
    counters[rank] = board.counters();
    maps[rank] = board.maps_board();
  });
  ASSERT_EQ(failure, "");
  for (std::uint32_t rank = 0; rank < kRanks; ++rank)
    EXPECT_EQ(maps[rank] != 0, GetParam().label == "ucx_shm")
        << "rank " << rank << ": over shared memory (only) slots and arrivals are plain loads and stores";
  std::uint64_t sleeps = 0, sent = 0;
  for (const auto& c : counters) {
    sleeps += c.sleeps;
    sent += c.wakeups_sent;
  }
  EXPECT_GT(sleeps, 0u) << "a 20 ms late rank must put the others to sleep";
  EXPECT_GT(sent, 0u) << "and its arrival must wake them";
  std::uint64_t local = 0;
  for (const auto& c : counters) local += c.local_sleeps;
  if (GetParam().label == "ucx_shm")
    EXPECT_EQ(local, sleeps) << "every rank maps the board over shared memory: each sleeps on the futex";
  else
    EXPECT_EQ(local, 0u) << "ranks that do not map the board sleep on its version";
}

// Row 1 ("done") is independent of row 0, and a wait skips the ranks told.
TEST_P(ArrivalBoardTest, RowsAndSkippedRanksAreIndependent) {
  const auto failure = run_ranks(50us, [&](std::uint32_t rank, smb::python::ArrivalBoard& board) {
    if (rank != 2) board.mark(1, 1);
    if (!board.wait(1, 1, {2}, 5s)) throw std::runtime_error("row 1 without rank 2 did not complete");
    if (board.wait(1, 1, {}, 1ms)) throw std::runtime_error("row 1 completed without rank 2");
    if (board.wait(0, 1, {}, 1ms)) throw std::runtime_error("row 0 completed with nobody there");
    const auto reached = board.reached(1, 1);
    if (reached != std::vector<std::uint64_t>{1, 1, 0}) throw std::runtime_error("row 1 reads wrong");
  });
  EXPECT_EQ(failure, "");
}

// One rank's key differs: every rank's reduce() refuses, none reduces.
TEST_P(ArrivalBoardTest, ADifferentKeyIsAMismatchOnEveryRank) {
  std::vector<int> outcomes(kRanks, -1);
  const auto failure = run_ranks(50us, [&](std::uint32_t rank, smb::python::ArrivalBoard& board) {
    const auto mine = values(rank, 1);
    std::vector<float> out(kFloats);
    const std::uint64_t key = rank == 1 ? 43 : 42;
    auto outcome = board.allreduce(1, key, std::as_bytes(std::span(mine)), {}, smb::DType::f32, "max",
                                   std::as_writable_bytes(std::span(out)), 5s);
    outcomes[rank] = static_cast<int>(outcome);
  });
  ASSERT_EQ(failure, "");
  for (std::uint32_t r = 0; r < kRanks; ++r)
    EXPECT_EQ(outcomes[r], static_cast<int>(smb::python::ArrivalBoard::Outcome::mismatch)) << "rank " << r;
}

// A slot that does not fit is refused before anything is written.
TEST_P(ArrivalBoardTest, ASlotThatDoesNotFitIsRefused) {
  auto client = make_client();
  auto buffer = client.open("ctl");
  smb::python::ArrivalBoard board(buffer, kRanks, 0, kSlotBytes, 50us);
  const std::vector<std::byte> big(kSlotBytes);
  try {
    board.post(1, 1, big, {});
    FAIL() << "a payload as large as the slot must be refused";
  } catch (const smb::Error& e) {
    EXPECT_EQ(e.code(), smb::Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("do not fit"), std::string::npos) << e.what();
  }
  EXPECT_EQ(board.reached(0, 1), (std::vector<std::uint64_t>{0, 0, 0}));
}

INSTANTIATE_TEST_SUITE_P(Fabrics, ArrivalBoardTest, testing::ValuesIn(all_fabrics()), fabric_name);

}  // namespace
