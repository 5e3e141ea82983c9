#include "op_clock.hpp"

#include <fstream>
#include <string>
#include <thread>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace smb::bench {
namespace {

using Steady = std::chrono::steady_clock;

std::uint64_t steady_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Steady::now().time_since_epoch()).count());
}

// The TSC ticks at one rate whatever the core's frequency or sleep state.
bool invariant_tsc() {
#if defined(__x86_64__)
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("flags", 0) == 0)
      return line.find(" constant_tsc") != std::string::npos && line.find(" nonstop_tsc") != std::string::npos;
#endif
  return false;
}

}  // namespace

OpClock::OpClock() {
#if defined(__x86_64__)
  if (!invariant_tsc()) return;
  const auto ns0 = steady_ns();
  const auto t0 = __rdtsc();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto ns1 = steady_ns();
  const auto t1 = __rdtsc();
  if (t1 <= t0 || ns1 <= ns0) return;
  ns_per_tick_ = static_cast<double>(ns1 - ns0) / static_cast<double>(t1 - t0);
  tsc_ = true;
#endif
}

std::uint64_t OpClock::now() const {
#if defined(__x86_64__)
  if (tsc_) return __rdtsc();
#endif
  return steady_ns();
}

}  // namespace smb::bench
