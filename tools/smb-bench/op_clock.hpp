#pragma once
// The clock smb-bench times single ops with. A sub-microsecond op (a
// shared-memory atomic) is a few times the cost of reading the clock, so
// this reads the CPU's time-stamp counter where it is invariant (constant and
// nonstop, as Linux reports in /proc/cpuinfo), as ucx_perftest does: about
// 11 ns a read here against 32 ns for steady_clock. The tick length is
// calibrated against steady_clock once. Elsewhere it is steady_clock.
#include <chrono>
#include <cstdint>

namespace smb::bench {

class OpClock {
 public:
  OpClock();
  std::uint64_t now() const;  // ticks
  std::uint64_t ns(std::uint64_t ticks) const { return static_cast<std::uint64_t>(static_cast<double>(ticks) * ns_per_tick_); }

 private:
  bool tsc_ = false;
  double ns_per_tick_ = 1.0;
};

}  // namespace smb::bench
