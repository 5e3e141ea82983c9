#pragma once
// Runs a benchmark body on N threads that start together, and times them.
#include "op_clock.hpp"
#include "results.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <latch>
#include <mutex>
#include <thread>
#include <vector>

namespace smb::bench {

// What each thread's body gets: its index, a start() to call once its set-up
// is done (it returns when every thread is ready and the clock runs), and a
// stop flag that is raised when another thread failed.
struct ThreadContext {
  std::uint32_t index;
  std::latch& ready;
  std::latch& go;
  const std::atomic<bool>& stop;
  bool started = false;
  void start() {
    started = true;
    ready.count_down();
    go.wait();
  }
};

// Runs body(ThreadContext&) on `count` threads; returns the seconds from the
// moment all were ready until the last finished. Rethrows the first failure.
template <class Body>
double run_threads(std::uint32_t count, Body body) {
  std::latch ready(static_cast<std::ptrdiff_t>(count) + 1);
  std::latch go(1);
  std::atomic<bool> stop{false};
  std::mutex failure_mutex;
  std::exception_ptr failure;
  auto record_failure = [&](std::exception_ptr e) {
    std::lock_guard lock(failure_mutex);
    if (!failure) failure = std::move(e);
    stop = true;
  };

  std::vector<std::thread> threads;
  threads.reserve(count);
  std::uint32_t launched = 0;
  try {
    for (; launched < count; ++launched) {
      threads.emplace_back([&, launched] {
        ThreadContext context{launched, ready, go, stop};
        try {
          body(context);
        } catch (...) {
          record_failure(std::current_exception());
        }
        if (!context.started) ready.count_down();
      });
    }
  } catch (...) {  // could not start a thread: stand in for the missing ones
    record_failure(std::current_exception());
    ready.count_down(count - launched);
  }
  ready.arrive_and_wait();
  const auto begin = std::chrono::steady_clock::now();
  go.count_down();
  for (auto& t : threads) t.join();
  const auto end = std::chrono::steady_clock::now();
  if (failure) std::rethrow_exception(failure);
  return std::chrono::duration<double>(end - begin).count();
}

// The common case: each of `threads` threads calls op(thread, i) for
// i = 0 .. iters-1, one latency sample per call, `bytes_per_op` each.
template <class Op>
PhaseResult run_timed_ops(std::uint32_t threads, std::uint64_t iters, std::uint64_t bytes_per_op, Op op) {
  std::vector<PhaseResult> results(threads);
  PhaseResult total;
  total.seconds = run_threads(threads, [&](ThreadContext& context) {
    PhaseResult& mine = results[context.index];
    mine.latencies_ns.reserve(static_cast<std::size_t>(iters));
    context.start();
    // One clock read per op, as ucx_perftest takes one timestamp per
    // iteration: the end of one sample is the start of the next. Two reads
    // of steady_clock per op cost a shared-memory atomic half its time.
    static const OpClock clock;
    auto last = clock.now();
    for (std::uint64_t i = 0; i < iters && !context.stop; ++i) {
      op(context.index, i);
      const auto now = clock.now();
      mine.latencies_ns.push_back(clock.ns(now - last));
      last = now;
      ++mine.ops;
      mine.bytes += bytes_per_op;
    }
  });
  for (auto& r : results) total.merge(std::move(r));
  return total;
}

}  // namespace smb::bench
