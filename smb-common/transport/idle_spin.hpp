#pragma once
// When a server transport's thread may go to sleep. Sleeping costs a small
// call its wake-up (tens of microseconds on a busy host); never sleeping
// costs a core. In between, as adaptive RPC systems do: after work, keep
// looking for `ServerTuning::spin` before sleeping, so a client's next call
// in a chain (write, accumulate, notify, read) finds the thread awake, while
// an idle server still sleeps.
#include "transport/transport.hpp"

#include <chrono>

namespace smb::transport {

class IdleSpin {
 public:
  explicit IdleSpin(const ServerTuning& tuning) : tuning_(tuning) {}

  // After one pass of the loop, which did work or not: true when the thread
  // may sleep now, false when it should look again at once.
  bool may_sleep(bool worked) {
    if (tuning_.busy_poll) return false;
    if (tuning_.spin.count() == 0) return true;
    const auto now = Clock::now();
    if (worked) {
      last_work_ = now;
      return false;
    }
    return now - last_work_ >= tuning_.spin;
  }
  // The thread woke from a sleep: work has come.
  void woke() { last_work_ = Clock::now(); }

 private:
  using Clock = std::chrono::steady_clock;
  ServerTuning tuning_;
  Clock::time_point last_work_{};
};

}  // namespace smb::transport
