#pragma once
// What a benchmark phase measured.
#include <cstdint>
#include <optional>
#include <vector>

namespace smb::bench {

// The first byte that did not hold the verification pattern.
struct Mismatch {
  std::uint64_t offset = 0;
  unsigned expected = 0;
  unsigned got = 0;
};

// fetch-add --verify: the words' sum grew by `got` instead of `expected`.
struct SumMismatch {
  std::uint64_t expected = 0;
  std::uint64_t got = 0;
};

// accumulate/axpy --verify: the first element that did not hold `expected`.
struct ValueMismatch {
  std::uint64_t element = 0;
  double expected = 0;
  double got = 0;
};

struct PhaseResult {
  std::uint64_t ops = 0;
  std::uint64_t bytes = 0;
  double seconds = 0;
  std::vector<std::uint64_t> latencies_ns;  // one per op, unordered
  std::optional<Mismatch> mismatch;         // pattern checks only

  // Folds in one thread's ops, latencies and mismatch.
  void merge(PhaseResult&& other);
};

// Latency percentile (nearest rank) in microseconds; 0 without samples.
// Reorders the samples.
double percentile_us(std::vector<std::uint64_t>& latencies_ns, double fraction);

}  // namespace smb::bench
