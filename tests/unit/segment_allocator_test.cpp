// SegmentAllocator: the daemon's pool must hand out aligned, non-overlapping
// ranges, say "no" cleanly when full, and get memory back (coalesced) on free.
#include "segment_allocator.hpp"

#include <smb/error.hpp>

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <random>
#include <vector>

namespace {

using smb::server::SegmentAllocator;
constexpr std::uint64_t kPage = 4096;

// Allocates and returns the offset, failing the test when there is no space.
std::uint64_t must_allocate(SegmentAllocator& a, std::uint64_t length, std::uint64_t* reserved = nullptr) {
  const auto taken = a.take(length);
  EXPECT_TRUE(taken.has_value()) << "no space for " << length << " bytes";
  if (reserved) *reserved = taken ? taken->reserved : 0;
  return taken ? taken->offset : 0;
}

TEST(SegmentAllocator, CapacityIsRoundedDownToTheAlignment) {
  SegmentAllocator a(10000, kPage);
  EXPECT_EQ(a.capacity(), 2 * kPage);
  EXPECT_EQ(a.largest_free(), 2 * kPage);
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.free_ranges(), 1u);
}

TEST(SegmentAllocator, RejectsAlignmentThatIsNotAPowerOfTwo) {
  for (std::uint64_t bad : {std::uint64_t{3}, std::uint64_t{4095}, std::uint64_t{6144}}) {
    try {
      SegmentAllocator a(1 << 20, bad);
      ADD_FAILURE() << "alignment " << bad << " was accepted";
    } catch (const smb::Error& e) {
      EXPECT_EQ(e.code(), smb::Errc::invalid_argument) << bad;
    }
  }
}

// Separate from the case above: a zero alignment must be rejected before it
// is used as a divisor (a crash here would take the other cases with it).
TEST(SegmentAllocator, RejectsZeroAlignment) {
  try {
    SegmentAllocator a(1 << 20, 0);
    ADD_FAILURE() << "alignment 0 was accepted";
  } catch (const smb::Error& e) {
    EXPECT_EQ(e.code(), smb::Errc::invalid_argument);
  }
}

TEST(SegmentAllocator, RoundsLengthsUpAndAlignsOffsets) {
  SegmentAllocator a(64 * kPage, kPage);
  std::uint64_t reserved = 0;
  EXPECT_EQ(must_allocate(a, 1, &reserved), 0u);
  EXPECT_EQ(reserved, kPage);
  const auto second = must_allocate(a, kPage + 1, &reserved);
  EXPECT_EQ(second % kPage, 0u);
  EXPECT_EQ(reserved, 2 * kPage);
  EXPECT_EQ(a.used(), 3 * kPage);
}

TEST(SegmentAllocator, HonoursLargeAlignments) {
  constexpr std::uint64_t kHuge = 2 << 20;
  SegmentAllocator a(16 * kHuge, kHuge);
  for (int i = 0; i < 5; ++i) {
    std::uint64_t reserved = 0;
    EXPECT_EQ(must_allocate(a, 12345, &reserved) % kHuge, 0u);
    EXPECT_EQ(reserved, kHuge);
  }
}

TEST(SegmentAllocator, ZeroAndOversizedRequestsGetNothing) {
  SegmentAllocator a(4 * kPage, kPage);
  EXPECT_FALSE(a.take(0));
  EXPECT_FALSE(a.take(4 * kPage + 1));
  // Must not overflow while rounding up.
  EXPECT_FALSE(a.take(std::numeric_limits<std::uint64_t>::max()));
  EXPECT_FALSE(a.take(std::numeric_limits<std::uint64_t>::max() - kPage));
  EXPECT_EQ(a.used(), 0u);
}

TEST(SegmentAllocator, FullPoolSaysNoSpaceUntilSomethingIsFreed) {
  SegmentAllocator a(4 * kPage, kPage);
  std::uint64_t reserved = 0;
  const auto all = must_allocate(a, 4 * kPage, &reserved);
  EXPECT_EQ(a.used(), a.capacity());
  EXPECT_EQ(a.largest_free(), 0u);
  EXPECT_FALSE(a.take(1));
  a.release(all, reserved);
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(must_allocate(a, 4 * kPage), 0u);
}

TEST(SegmentAllocator, FreeCoalescesWithBothNeighbours) {
  SegmentAllocator a(4 * kPage, kPage);
  const auto first = must_allocate(a, kPage);
  const auto middle = must_allocate(a, kPage);
  const auto last = must_allocate(a, kPage);
  EXPECT_EQ(a.free_ranges(), 1u);  // the fourth page
  a.release(first, kPage);
  a.release(last, kPage);  // merges with the free tail
  EXPECT_EQ(a.free_ranges(), 2u);
  a.release(middle, kPage);  // merges with both sides at once
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(a.largest_free(), a.capacity());
  EXPECT_EQ(a.used(), 0u);
}

TEST(SegmentAllocator, FragmentedFreeSpaceIsNotHandedOutAsOneRange) {
  SegmentAllocator a(8 * kPage, kPage);
  std::vector<std::uint64_t> pages;
  for (int i = 0; i < 8; ++i) pages.push_back(must_allocate(a, kPage));
  for (std::size_t i = 0; i < pages.size(); i += 2) a.release(pages[i], kPage);
  EXPECT_EQ(a.used(), 4 * kPage);
  EXPECT_EQ(a.free_ranges(), 4u);
  EXPECT_EQ(a.largest_free(), kPage);
  EXPECT_FALSE(a.take(2 * kPage)) << "4 free pages, but no two adjacent";
  for (std::size_t i = 1; i < pages.size(); i += 2) a.release(pages[i], kPage);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(must_allocate(a, 8 * kPage), 0u) << "freed memory came back as one range";
}

TEST(SegmentAllocator, BestFitKeepsLargeHolesForLargeRequests) {
  SegmentAllocator a(16 * kPage, kPage);
  const auto big_hole = must_allocate(a, 3 * kPage);
  must_allocate(a, kPage);  // separator
  const auto small_hole = must_allocate(a, kPage);
  must_allocate(a, 11 * kPage);  // the rest
  a.release(big_hole, 3 * kPage);
  a.release(small_hole, kPage);
  EXPECT_EQ(must_allocate(a, kPage), small_hole);
  EXPECT_EQ(a.largest_free(), 3 * kPage);
  EXPECT_EQ(must_allocate(a, 3 * kPage), big_hole);
}

// Random alloc/free against a model: no overlap, alignment, exact accounting,
// and everything back as one range at the end.
TEST(SegmentAllocator, RandomWorkloadNeverOverlapsAndReturnsEverything) {
  constexpr std::uint64_t kCapacity = 256 * kPage;
  SegmentAllocator a(kCapacity, kPage);
  std::map<std::uint64_t, std::uint64_t> live;  // offset -> reserved
  std::mt19937_64 rng(12345);
  std::uint64_t used = 0;
  for (int step = 0; step < 5000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const std::uint64_t length = 1 + rng() % (12 * kPage);
      const auto taken = a.take(length);
      if (!taken) {
        EXPECT_LT(a.largest_free(), length) << "refused although a range was free";
        continue;
      }
      const auto offset = taken->offset, reserved = taken->reserved;
      ASSERT_EQ(offset % kPage, 0u);
      ASSERT_GE(reserved, length);
      ASSERT_LE(offset + reserved, kCapacity);
      auto next = live.lower_bound(offset);
      if (next != live.end()) {
        ASSERT_LE(offset + reserved, next->first) << "overlaps the next range";
      }
      if (next != live.begin()) {
        ASSERT_LE(std::prev(next)->first + std::prev(next)->second, offset) << "overlaps the previous range";
      }
      live[offset] = reserved;
      used += reserved;
    } else {
      auto victim = live.begin();
      std::advance(victim, static_cast<long>(rng() % live.size()));
      a.release(victim->first, victim->second);
      used -= victim->second;
      live.erase(victim);
    }
    ASSERT_EQ(a.used(), used);
  }
  for (const auto& [offset, reserved] : live) a.release(offset, reserved);
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.free_ranges(), 1u);
  EXPECT_EQ(a.largest_free(), kCapacity);
}

// take() says which parts of a new range an earlier range covered: only
// those can hold an old buffer's bytes, so only those are zeroed (the rest
// of the pool has never been handed out). Checked against a page map.
TEST(SegmentAllocator, TakeSaysWhichPartsAnEarlierRangeHeld) {
  SegmentAllocator a(16 * kPage, kPage);
  const auto first = a.take(2 * kPage);
  ASSERT_TRUE(first);
  EXPECT_TRUE(first->held_before.empty()) << "a fresh pool has held nothing";
  a.release(first->offset, first->reserved);
  const auto second = a.take(5 * kPage);  // over the first range and beyond it
  ASSERT_TRUE(second);
  EXPECT_EQ(second->offset, first->offset);
  EXPECT_EQ(second->held_before, (std::vector<SegmentAllocator::Range>{{first->offset, 2 * kPage}}));
  const auto third = a.take(3 * kPage);  // next to it: never held
  ASSERT_TRUE(third);
  EXPECT_TRUE(third->held_before.empty());
}

TEST(SegmentAllocator, HeldBeforeMatchesAPageMapUnderRandomUse) {
  constexpr std::uint64_t kPages = 256;
  SegmentAllocator a(kPages * kPage, kPage);
  std::vector<bool> ever(kPages, false);
  std::map<std::uint64_t, std::uint64_t> live;
  std::mt19937_64 rng(7);
  for (int step = 0; step < 4000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const auto taken = a.take(1 + rng() % (24 * kPage));
      if (!taken) continue;
      std::vector<bool> reported(kPages, false);
      std::uint64_t last_end = 0;
      for (const auto& r : taken->held_before) {
        ASSERT_GE(r.offset, last_end) << "ranges in order, disjoint";
        ASSERT_GT(r.length, 0u);
        ASSERT_GE(r.offset, taken->offset);
        ASSERT_LE(r.offset + r.length, taken->offset + taken->reserved);
        for (auto p = r.offset / kPage; p < (r.offset + r.length) / kPage; ++p) reported[p] = true;
        last_end = r.offset + r.length;
      }
      for (auto p = taken->offset / kPage; p < (taken->offset + taken->reserved) / kPage; ++p) {
        ASSERT_EQ(reported[p], ever[p]) << "page " << p << (ever[p] ? " was held before" : " was never held");
        ever[p] = true;
      }
      live[taken->offset] = taken->reserved;
    } else {
      auto victim = live.begin();
      std::advance(victim, static_cast<long>(rng() % live.size()));
      a.release(victim->first, victim->second);
      live.erase(victim);
    }
  }
}

}  // namespace
