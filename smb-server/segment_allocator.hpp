#pragma once
// Hands out aligned ranges of the daemon's pool. Best fit over a free list
// kept both by offset (to coalesce neighbours on free) and by size (to find
// the best fit), so fragmentation stays low and freed memory comes back.
// It also remembers which parts of the pool any range ever covered: the
// rest has never been handed out and still holds the zeros the kernel gave
// it, so a new buffer need not be zeroed there (a repair's new copy of a
// fresh server, or any buffer on a new smbd, skips rewriting its memory).
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace smb::server {

class SegmentAllocator {
 public:
  SegmentAllocator(std::uint64_t capacity, std::uint64_t alignment);

  struct Range {
    std::uint64_t offset = 0, length = 0;
    bool operator==(const Range&) const = default;
  };
  struct Allocation {
    std::uint64_t offset = 0;
    std::uint64_t reserved = 0;    // the length actually taken (rounded up to the alignment)
    std::vector<Range> held_before;  // parts an earlier range covered: they keep its bytes until zeroed
  };
  // A new range of at least `length` bytes, or nullopt when no free range is
  // large enough.
  std::optional<Allocation> take(std::uint64_t length);
  void release(std::uint64_t offset, std::uint64_t reserved);

  std::uint64_t capacity() const { return capacity_; }
  std::uint64_t used() const;
  std::uint64_t largest_free() const;
  std::size_t free_ranges() const;

 private:
  void insert_free(std::uint64_t offset, std::uint64_t length);
  void erase_free(std::map<std::uint64_t, std::uint64_t>::iterator it);
  std::vector<Range> mark_taken(std::uint64_t offset, std::uint64_t length);

  std::uint64_t capacity_ = 0;
  const std::uint64_t alignment_;
  mutable std::mutex mutex_;
  std::map<std::uint64_t, std::uint64_t> by_offset_;           // offset -> length
  std::set<std::pair<std::uint64_t, std::uint64_t>> by_size_;  // (length, offset)
  std::uint64_t used_ = 0;
  std::map<std::uint64_t, std::uint64_t> ever_taken_;  // offset -> end, disjoint, coalesced
};

}  // namespace smb::server
