#pragma once
// The daemon's memory, reserved once at start: huge pages when the system
// has them reserved, else normal pages (with transparent huge pages advised).
// Reserving is instant; PoolPopulator faults the pages in afterwards, in the
// background, and records here how far it got (smbctl status shows it).
#include <atomic>
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
  // Bytes from the start of the pool whose pages are in place; size() once
  // the pool is whole.
  std::uint64_t populated() const { return populated_.load(std::memory_order_relaxed); }
  void set_populated(std::uint64_t bytes) { populated_.store(bytes, std::memory_order_relaxed); }

  // Faults [p, p + n) in without changing a byte, so that a client (CPU or
  // NIC) may be writing there meanwhile: MADV_POPULATE_WRITE (Linux 5.14),
  // or on older kernels an atomic add of zero to one word of each page,
  // which a concurrent writer cannot interleave with. False, with errno set,
  // where the kernel refused (the pages then fault in as they are used).
  static bool fault_in(std::byte* p, std::uint64_t n);

  // Work the background populator steps aside for while it runs: a repair's
  // pull onto a server that has just started, a new buffer's first touch
  // (SegmentStore::clear). On a busy host the two
  // competed for the cores and memory bandwidth, and the populator, niced
  // and holding the address space's lock while it faults a chunk in,
  // stalled the pull's UCX set-up for hundreds of milliseconds
  // (docs/reliability.md). The pull's own pages are faulted in already
  // (SegmentStore::clear), so nothing needs the populator meanwhile.
  class Foreground {
   public:
    explicit Foreground(MemoryPool& pool) : pool_(pool) { pool_.foreground_.fetch_add(1); }
    ~Foreground() { pool_.foreground_.fetch_sub(1); }
    Foreground(const Foreground&) = delete;
    Foreground& operator=(const Foreground&) = delete;

   private:
    MemoryPool& pool_;
  };
  bool foreground_busy() const { return foreground_.load(std::memory_order_relaxed) > 0; }

 private:
  std::byte* base_ = nullptr;
  std::uint64_t size_ = 0;
  bool huge_pages_ = false;
  std::atomic<std::uint64_t> populated_{0};
  std::atomic<int> foreground_{0};
};

}  // namespace smb::server
