#pragma once
// Faults the daemon's pool in behind its back, so that smbd answers within
// moments whatever its --capacity (faulting 1 GiB took 1.7 s on a quiet
// machine and 11-15 s on a busy one), while the pool is still in place
// before most of it is used. A buffer made meanwhile faults its own range
// in when it is zeroed (SegmentStore::alloc_segment), so nothing waits for
// this thread and nothing it does is needed for correctness. It waits while
// foreground work holds the pool (MemoryPool::Foreground: a repair's pull, a
// new buffer's first touch).
//
// Pages that clients may already be writing are never written here
// (MemoryPool::fault_in).
#include "memory_pool.hpp"

#include <chrono>
#include <functional>
#include <string>
#include <thread>

namespace smb::server {

class PoolPopulator {
 public:
  // `done` runs on this object's thread once the whole pool is in place,
  // or once faulting failed (`error` says why: the pool then faults in as
  // it is used, as any anonymous memory would); never after a stop.
  using Done = std::function<void(std::chrono::milliseconds took, const std::string& error)>;
  PoolPopulator(MemoryPool& pool, Done done);
  ~PoolPopulator();  // stops between two chunks; joins
  PoolPopulator(const PoolPopulator&) = delete;
  PoolPopulator& operator=(const PoolPopulator&) = delete;

 private:
  void run(const std::stop_token& stop);
  MemoryPool& pool_;
  Done done_;
  std::jthread thread_;
};

}  // namespace smb::server
