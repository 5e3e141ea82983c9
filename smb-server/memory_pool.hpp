#pragma once
// The daemon's memory, reserved once at start: huge pages when the system
// has them reserved, else normal pages (with transparent huge pages advised),
// pre-faulted so that the first remote access does not pay for page faults.
#include <cstddef>
#include <cstdint>

namespace smb::server {

class MemoryPool {
 public:
  explicit MemoryPool(std::uint64_t capacity);
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  std::byte* base() const { return base_; }
  std::uint64_t size() const { return size_; }
  bool huge_pages() const { return huge_pages_; }

 private:
  std::byte* base_ = nullptr;
  std::uint64_t size_ = 0;
  bool huge_pages_ = false;
};

}  // namespace smb::server
