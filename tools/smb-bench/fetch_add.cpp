#include "fetch_add.hpp"

#include "parallel.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

namespace smb::bench {
namespace {

constexpr std::uint64_t chunk_words = 1u << 17;  // 1 MiB per read/write

}  // namespace

PhaseResult run_fetch_add(Buffer& buffer, std::uint64_t words, std::uint64_t iters, std::uint32_t threads) {
  return run_timed_ops(threads, iters, 8, [&](std::uint32_t, std::uint64_t i) { buffer.fetch_add(i % words * 8, 1); });
}

std::uint64_t touched_words(std::uint64_t words, std::uint64_t iters) { return std::min(words, iters); }

void zero_words(Buffer& buffer, std::uint64_t count) {
  const std::vector<std::byte> zeros(static_cast<std::size_t>(std::min(count, chunk_words) * 8));
  for (std::uint64_t first = 0; first < count; first += chunk_words) {
    const auto n = static_cast<std::size_t>(std::min(chunk_words, count - first) * 8);
    buffer.write(first * 8, {zeros.data(), n});
  }
}

std::uint64_t sum_words(Buffer& buffer, std::uint64_t count) {
  std::vector<std::byte> bytes(static_cast<std::size_t>(std::min(count, chunk_words) * 8));
  std::uint64_t sum = 0;
  for (std::uint64_t first = 0; first < count; first += chunk_words) {
    const auto n = static_cast<std::size_t>(std::min(chunk_words, count - first));
    buffer.read(first * 8, {bytes.data(), n * 8});
    for (std::size_t i = 0; i < n; ++i) {
      std::uint64_t word = 0;  // atomics work on native-endian words
      std::memcpy(&word, bytes.data() + i * 8, 8);
      sum += word;
    }
  }
  return sum;
}

}  // namespace smb::bench
