#include "results.hpp"

#include <algorithm>
#include <cmath>

namespace smb::bench {

void PhaseResult::merge(PhaseResult&& other) {
  ops += other.ops;
  bytes += other.bytes;
  latencies_ns.insert(latencies_ns.end(), other.latencies_ns.begin(), other.latencies_ns.end());
  if (other.mismatch && (!mismatch || other.mismatch->offset < mismatch->offset)) mismatch = other.mismatch;
}

double percentile_us(std::vector<std::uint64_t>& latencies_ns, double fraction) {
  if (latencies_ns.empty()) return 0;
  const double n = static_cast<double>(latencies_ns.size());
  auto rank = static_cast<std::size_t>(std::ceil(fraction * n));
  rank = std::clamp<std::size_t>(rank, 1, latencies_ns.size());
  auto nth = latencies_ns.begin() + static_cast<std::ptrdiff_t>(rank - 1);
  std::nth_element(latencies_ns.begin(), nth, latencies_ns.end());
  return static_cast<double>(*nth) / 1000.0;
}

}  // namespace smb::bench
