#include "sync_ops.hpp"

#include "parallel.hpp"

#include <array>
#include <cstring>
#include <vector>

namespace smb::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t ns_since(Clock::time_point begin) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - begin).count());
}

}  // namespace

PhaseResult run_compare_swap(Buffer& buffer, std::uint64_t words, std::uint64_t iters, std::uint32_t threads,
                             std::uint64_t& swaps) {
  // Per thread: what it believes each word holds, and its successful swaps.
  const auto touched = static_cast<std::size_t>(std::min(words, iters));
  std::vector<std::vector<std::uint64_t>> guesses(threads, std::vector<std::uint64_t>(touched, 0));
  std::vector<std::uint64_t> won(threads, 0);
  auto result = run_timed_ops(threads, iters, 8, [&](std::uint32_t thread, std::uint64_t i) {
    auto& guess = guesses[thread][static_cast<std::size_t>(i % touched)];
    const std::uint64_t old = buffer.compare_swap(i % touched * 8, guess, guess + 1);
    if (old == guess) {
      ++won[thread];
      guess = old + 1;
    } else {
      guess = old;  // lost to another thread (or a stale guess): try from what is there
    }
  });
  swaps = 0;
  for (auto w : won) swaps += w;
  return result;
}

// `buffer` and `peer`: the same buffer opened by two clients, so that the
// two sides share nothing in this process (as two workers would not).
PhaseResult run_notify(Buffer& buffer, Buffer& peer, std::uint64_t iters, std::chrono::milliseconds timeout) {
  const std::uint64_t start = buffer.version();
  std::array<float, 1> one{1.0F};
  const auto x = std::as_bytes(std::span<const float>(one));
  PhaseResult result;
  result.latencies_ns.reserve(static_cast<std::size_t>(iters));
  result.seconds = run_threads(2, [&](ThreadContext& context) {
    const bool first = context.index == 0;
    context.start();
    // Version start+1, +2, ...: the first side bumps the odd ones, the second the even ones.
    for (std::uint64_t i = 0; i < iters && !context.stop; ++i) {
      const std::uint64_t base = start + 2 * i;
      if (first) {
        const auto begin = Clock::now();
        buffer.apply(VectorOp::accumulate, DType::f32, 0, 1, 1.0, x);
        buffer.wait_version(base + 2, timeout);
        result.latencies_ns.push_back(ns_since(begin) / 2);
        ++result.ops;
        result.bytes += 2 * sizeof(float);
      } else {
        peer.wait_version(base + 1, timeout);
        peer.apply(VectorOp::accumulate, DType::f32, 0, 1, 1.0, x);
      }
    }
  });
  return result;
}

PhaseResult run_barrier(Client& client, const std::string& name, std::uint32_t parties, std::uint64_t iters,
                        std::uint32_t threads, std::chrono::milliseconds timeout) {
  return run_timed_ops(threads, iters, 0,
                       [&](std::uint32_t, std::uint64_t) { client.barrier(name, parties, timeout); });
}

}  // namespace smb::bench
