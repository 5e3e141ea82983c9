#pragma once
// How a client's progress call behaves when it found nothing to do. A waiting
// caller polls in a loop (Request::wait); yielding the CPU after every empty
// poll costs each small op a system call and, when a reply lands during it,
// the rest of the time slice. So, as RPC libraries that poll do: keep polling
// for a few dozen empty rounds (a few microseconds, about one round trip),
// then yield on every empty round, so that a wait still shares the core.
//
// Unless another thread of this process is waiting too: then the reply that
// came may be the other thread's, and on a busy core it runs only when this
// one yields (two workers' threads notifying each other: 3 us instead of 7).
//
// A wait that stays idle past kSpinBeforeBlocking (a large transfer over a
// slow link, a barrier for a slow peer) stops burning the CPU: spinning
// waiters on a shared host took the CPU from the servers and the network
// stack they were waiting for (4 workers on 2 cores, 100 MB over 1 Gbit/s:
// minutes instead of seconds). It blocks until the transport has an event
// (UCX: its worker's event fd), at most kBlockAtMost at a time so that the
// wait still checks its deadline and the server's liveness; a transport
// without such a wake-up sleeps kIdleSleep instead.
//
// The state is per wait: each PollingThread starts counting afresh.
#include <atomic>
#include <chrono>
#include <thread>

namespace smb::transport {

inline constexpr unsigned kEmptyPollsBeforeYield = 64;
inline constexpr std::chrono::microseconds kSpinBeforeBlocking{200};
inline constexpr std::chrono::microseconds kBlockAtMost{1000};
inline constexpr std::chrono::microseconds kIdleSleep{50};

// Threads of this process inside a wait loop (PollingThread).
inline std::atomic<unsigned> polling_threads{0};

// This thread's current wait.
struct IdleState {
  unsigned empty_rounds = 0;
  std::chrono::steady_clock::time_point idle_since;
};
inline thread_local IdleState idle_state;

// Counts the calling thread as waiting for its lifetime; a new wait polls
// before it yields or blocks, whatever the last one did.
class PollingThread {
 public:
  PollingThread() noexcept {
    polling_threads.fetch_add(1, std::memory_order_relaxed);
    idle_state = IdleState{};
  }
  ~PollingThread() { polling_threads.fetch_sub(1, std::memory_order_relaxed); }
  PollingThread(const PollingThread&) = delete;
  PollingThread& operator=(const PollingThread&) = delete;
};

// After one progress round of the calling thread, which found `events` or
// not. `block(limit)` waits up to `limit` for the transport's next event and
// returns false where the transport cannot (then this sleeps kIdleSleep).
template <class Block>
void yield_when_idle(bool events, Block&& block) {
  using Clock = std::chrono::steady_clock;
  auto& s = idle_state;
  if (events) {
    s.empty_rounds = 0;
    return;
  }
  const unsigned patience = polling_threads.load(std::memory_order_relaxed) > 1 ? 1 : kEmptyPollsBeforeYield;
  if (++s.empty_rounds < patience) return;
  // The clock is read only once the spinning is over.
  const auto now = Clock::now();
  if (s.empty_rounds == patience) s.idle_since = now;
  if (now - s.idle_since < kSpinBeforeBlocking) {
    std::this_thread::yield();
  } else if (!block(kBlockAtMost)) {
    std::this_thread::sleep_for(kIdleSleep);
  }
}

inline void yield_when_idle(bool events) {
  yield_when_idle(events, [](std::chrono::microseconds) { return false; });
}

}  // namespace smb::transport
