#include "pool_populator.hpp"

#include <spdlog/spdlog.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace smb::server {
namespace {

// Small enough that a stop, or foreground work, waits little for the chunk
// in progress (the address space's lock is held while it faults in), large
// enough that the calls cost nothing next to the faults.
constexpr std::uint64_t kChunk = 2ull << 20;
constexpr auto kStepAside = std::chrono::milliseconds(2);

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
  std::string error;
  for (std::uint64_t off = 0; off < pool_.size() && !stop.stop_requested(); off += kChunk) {
    while (pool_.foreground_busy() && !stop.stop_requested()) std::this_thread::sleep_for(kStepAside);
    if (stop.stop_requested()) break;
    const std::uint64_t n = std::min(kChunk, pool_.size() - off);
    if (!MemoryPool::fault_in(pool_.base() + off, n)) {
      error = std::string("faulting the pool in failed at offset ") + std::to_string(off) + ": " +
              std::strerror(errno) + " (pages fault in as buffers are made)";
      break;
    }
    pool_.set_populated(off + n);
  }
  if (stop.stop_requested()) return;
  done_(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start), error);
}

}  // namespace smb::server
