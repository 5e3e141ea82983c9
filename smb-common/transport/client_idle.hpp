#pragma once
// How a client's progress call behaves when it found nothing to do. A waiting
// caller polls in a loop (Request::wait); yielding the CPU after every empty
// poll costs each small op a system call and, when a reply lands during it,
// the rest of the time slice. So, as RPC libraries that poll do: keep polling
// for a few dozen empty rounds (a few microseconds, about one round trip),
// then yield on every empty round, so that a long wait still shares the core.
//
// Unless another thread of this process is waiting too: then the reply that
// came may be the other thread's, and on a busy core it runs only when this
// one yields (two workers' threads notifying each other: 3 us instead of 7).
#include <atomic>
#include <thread>

namespace smb::transport {

inline constexpr unsigned kEmptyPollsBeforeYield = 64;

// Threads of this process inside a wait loop (PollingThread).
inline std::atomic<unsigned> polling_threads{0};

// Counts the calling thread as waiting for its lifetime.
class PollingThread {
 public:
  PollingThread() noexcept { polling_threads.fetch_add(1, std::memory_order_relaxed); }
  ~PollingThread() { polling_threads.fetch_sub(1, std::memory_order_relaxed); }
  PollingThread(const PollingThread&) = delete;
  PollingThread& operator=(const PollingThread&) = delete;
};

// After one progress round of the calling thread, which found `events` or not.
inline void yield_when_idle(bool events) {
  thread_local unsigned empty_rounds = 0;
  if (events) {
    empty_rounds = 0;
    return;
  }
  const unsigned patience = polling_threads.load(std::memory_order_relaxed) > 1 ? 1 : kEmptyPollsBeforeYield;
  if (++empty_rounds >= patience) std::this_thread::yield();
}

}  // namespace smb::transport
