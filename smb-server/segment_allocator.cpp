#include "segment_allocator.hpp"

#include <smb/error.hpp>

#include <algorithm>
#include <iterator>
#include <string>

namespace smb::server {

SegmentAllocator::SegmentAllocator(std::uint64_t capacity, std::uint64_t alignment)
    : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    throw Error(Errc::invalid_argument, "allocator alignment must be a power of two");
  capacity_ = capacity - capacity % alignment;
  if (capacity_ > 0) insert_free(0, capacity_);
}

std::optional<SegmentAllocator::Allocation> SegmentAllocator::take(std::uint64_t length) {
  if (length == 0 || length > capacity_) return std::nullopt;
  const std::uint64_t rounded = (length + alignment_ - 1) & ~(alignment_ - 1);
  std::lock_guard lock(mutex_);
  auto fit = by_size_.lower_bound({rounded, 0});
  if (fit == by_size_.end()) return std::nullopt;
  const auto [free_length, offset] = *fit;
  erase_free(by_offset_.find(offset));
  if (free_length > rounded) insert_free(offset + rounded, free_length - rounded);
  used_ += rounded;
  return Allocation{offset, rounded, mark_taken(offset, rounded)};
}

// Under the mutex: [offset, offset + length) joins ever_taken_; returns the
// parts of it that were there already.
std::vector<SegmentAllocator::Range> SegmentAllocator::mark_taken(std::uint64_t offset, std::uint64_t length) {
  std::uint64_t start = offset, end = offset + length;
  std::vector<Range> before;
  auto it = ever_taken_.upper_bound(offset);
  if (it != ever_taken_.begin() && std::prev(it)->second >= offset) --it;  // one that reaches into the range
  while (it != ever_taken_.end() && it->first <= end) {
    const auto lo = std::max(it->first, offset), hi = std::min(it->second, offset + length);
    if (lo < hi) before.push_back({lo, hi - lo});
    start = std::min(start, it->first);
    end = std::max(end, it->second);
    it = ever_taken_.erase(it);
  }
  ever_taken_.emplace(start, end);
  return before;
}

void SegmentAllocator::release(std::uint64_t offset, std::uint64_t reserved) {
  std::lock_guard lock(mutex_);
  std::uint64_t start = offset;
  std::uint64_t length = reserved;
  auto next = by_offset_.lower_bound(offset);
  if (next != by_offset_.end() && start + length == next->first) {
    length += next->second;
    erase_free(next);
  }
  auto after = by_offset_.lower_bound(offset);
  if (after != by_offset_.begin()) {
    auto prev = std::prev(after);
    if (prev->first + prev->second == start) {
      start = prev->first;
      length += prev->second;
      erase_free(prev);
    }
  }
  insert_free(start, length);
  used_ -= reserved;
}

void SegmentAllocator::insert_free(std::uint64_t offset, std::uint64_t length) {
  by_offset_.emplace(offset, length);
  by_size_.emplace(length, offset);
}

void SegmentAllocator::erase_free(std::map<std::uint64_t, std::uint64_t>::iterator it) {
  by_size_.erase({it->second, it->first});
  by_offset_.erase(it);
}

std::uint64_t SegmentAllocator::used() const {
  std::lock_guard lock(mutex_);
  return used_;
}

std::uint64_t SegmentAllocator::largest_free() const {
  std::lock_guard lock(mutex_);
  return by_size_.empty() ? 0 : by_size_.rbegin()->first;
}

std::size_t SegmentAllocator::free_ranges() const {
  std::lock_guard lock(mutex_);
  return by_offset_.size();
}

}  // namespace smb::server
