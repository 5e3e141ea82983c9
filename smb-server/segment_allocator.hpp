#pragma once
// Hands out aligned ranges of the daemon's pool. Best fit over a free list
// kept both by offset (to coalesce neighbours on free) and by size (to find
// the best fit), so fragmentation stays low and freed memory comes back.
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

namespace smb::server {

class SegmentAllocator {
 public:
  SegmentAllocator(std::uint64_t capacity, std::uint64_t alignment);

  // Offset of a new range of at least `length` bytes, or nullopt when no
  // free range is large enough. Returns the length actually reserved in `reserved`.
  std::optional<std::uint64_t> allocate(std::uint64_t length, std::uint64_t& reserved);
  void release(std::uint64_t offset, std::uint64_t reserved);

  std::uint64_t capacity() const { return capacity_; }
  std::uint64_t used() const;
  std::uint64_t largest_free() const;
  std::size_t free_ranges() const;

 private:
  void insert_free(std::uint64_t offset, std::uint64_t length);
  void erase_free(std::map<std::uint64_t, std::uint64_t>::iterator it);

  std::uint64_t capacity_ = 0;
  const std::uint64_t alignment_;
  mutable std::mutex mutex_;
  std::map<std::uint64_t, std::uint64_t> by_offset_;           // offset -> length
  std::set<std::pair<std::uint64_t, std::uint64_t>> by_size_;  // (length, offset)
  std::uint64_t used_ = 0;
};

}  // namespace smb::server
