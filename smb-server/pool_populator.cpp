#include "pool_populator.hpp"

#include <spdlog/spdlog.h>

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack it
#endif

namespace smb::server {
namespace {

// Small enough that a stop waits little, large enough that the calls cost
// nothing next to the faults.
constexpr std::uint64_t kChunk = 32ull << 20;
constexpr std::uint64_t kPage = 4096;

// Faults [p, p + n) in without changing a byte; false with errno set when
// the kernel refused (EINVAL: a kernel without MADV_POPULATE_WRITE).
bool populate_with_madvise(std::byte* p, std::uint64_t n) { return ::madvise(p, n, MADV_POPULATE_WRITE) == 0; }

void populate_with_atomics(std::byte* p, std::uint64_t n) {
  for (std::uint64_t off = 0; off < n; off += kPage)
    std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(p + off)).fetch_add(0, std::memory_order_relaxed);
}

}  // namespace

PoolPopulator::PoolPopulator(MemoryPool& pool, Done done)
    : pool_(pool), done_(std::move(done)), thread_([this](const std::stop_token& stop) { run(stop); }) {}

PoolPopulator::~PoolPopulator() {
  thread_.request_stop();
  if (thread_.joinable()) thread_.join();
}

void PoolPopulator::run(const std::stop_token& stop) {
  // Background work: the daemon's serving threads come first on a busy host.
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
  const auto start = std::chrono::steady_clock::now();
  bool madvise_works = true;
  std::string error;
  for (std::uint64_t off = 0; off < pool_.size() && !stop.stop_requested(); off += kChunk) {
    const std::uint64_t n = std::min(kChunk, pool_.size() - off);
    if (madvise_works && !populate_with_madvise(pool_.base() + off, n)) {
      if (errno != EINVAL) {
        error = std::string("faulting the pool in failed at offset ") + std::to_string(off) + ": " +
                std::strerror(errno) + " (pages fault in as buffers are made)";
        break;
      }
      madvise_works = false;  // an older kernel
    }
    if (!madvise_works) populate_with_atomics(pool_.base() + off, n);
    pool_.set_populated(off + n);
  }
  if (stop.stop_requested()) return;
  done_(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start), error);
}

}  // namespace smb::server
