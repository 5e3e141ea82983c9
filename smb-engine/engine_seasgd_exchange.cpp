// The update engine's SEASGD exchange, pipelined by chunk: a root reads the
// global weights chunk by chunk, moves its weights toward them, and a push
// task adds each chunk's increment into the global weights on the servers as
// soon as it is computed. Reads (server -> worker) and pushes (worker ->
// server) then run at the same time on a full-duplex link, the push of one
// exchange still overlapping what follows it (the next steps' compute, or
// the next exchange's reads).
//
//   this thread, chunk k: wait until the previous exchange's push of chunk k
//                         is in Wg (so the read sees this root's last update:
//                         no staler than unpipelined SEASGD);
//                         read Wg[k]; dW[k] = alpha (W[k] - Wg[k]); W[k] -= dW[k]
//   push task,   chunk k: once computed: Wg[k] += dW[k] on the servers
//                         (accumulate with x in the call: no delta area)
//
// A chunk is a few stripes on every server of the buffer, so each read and
// each push keeps every server's link busy.
#include "engine_core.hpp"

#include <algorithm>
#include <chrono>

namespace smb::detail {

namespace {
std::span<std::byte> bytes_of(std::span<float> v) { return std::as_writable_bytes(v); }
}  // namespace

// One exchange's push: which chunks are computed and which are in Wg.
struct EngineCore::SeasgdPush {
  std::mutex mutex;
  std::condition_variable changed;
  std::uint64_t computed = 0;
  std::uint64_t pushed = 0;
  bool abandoned = false;  // the exchange failed: push nothing more
  std::exception_ptr error;
  std::future<void> task;
};

void EngineCore::seasgd_exchange(std::span<float> params) {
  const std::uint64_t n = config_.parameters;
  const std::uint64_t per_chunk = chunk_floats();
  const std::uint64_t chunks = (n + per_chunk - 1) / per_chunk;
  const auto alpha = static_cast<float>(config_.alpha);
  auto wg = std::span<float>(scratch_).first(n);
  push_.resize(n);

  auto previous = std::move(seasgd_push_);
  auto current = std::make_shared<SeasgdPush>();
  current->task = std::async(std::launch::async, [this, current, chunks, per_chunk, n] {
    for (std::uint64_t k = 0; k < chunks; ++k) {
      {
        std::unique_lock lock(current->mutex);
        current->changed.wait(lock, [&] { return current->computed > k || current->abandoned; });
        if (current->abandoned) return;
      }
      const std::uint64_t first = k * per_chunk;
      const std::uint64_t count = std::min(per_chunk, n - first);
      try {
        global_.apply(VectorOp::accumulate, DType::f32, first * sizeof(float), count, 1.0,
                      std::as_bytes(std::span<const float>(push_).subspan(first, count)));
      } catch (...) {
        std::lock_guard lock(current->mutex);
        current->error = std::current_exception();
        current->changed.notify_all();
        return;
      }
      std::lock_guard lock(current->mutex);
      current->pushed = k + 1;
      current->changed.notify_all();
    }
  });
  auto abandon = [&] {
    {
      std::lock_guard lock(current->mutex);
      current->abandoned = true;
      current->changed.notify_all();
    }
    current->task.wait();
  };

  try {
    for (std::uint64_t k = 0; k < chunks; ++k) {
      if (previous) wait_pushed(*previous, k + 1);
      const std::uint64_t first = k * per_chunk;
      const std::uint64_t count = std::min(per_chunk, n - first);
      global_.read(first * sizeof(float), bytes_of(wg.subspan(first, count)));
      for (std::uint64_t i = first; i < first + count; ++i) {
        push_[i] = alpha * (params[i] - wg[i]);
        params[i] -= push_[i];
      }
      std::lock_guard lock(current->mutex);
      current->computed = k + 1;
      current->changed.notify_all();
    }
  } catch (...) {
    abandon();
    throw;
  }
  if (previous) previous->task.get();  // it has pushed every chunk: only its return is left
  seasgd_push_ = std::move(current);
}

// Waits until `push` has put `chunks` chunks into Wg; rethrows its error.
void EngineCore::wait_pushed(SeasgdPush& push, std::uint64_t chunks) {
  std::unique_lock lock(push.mutex);
  const bool done = push.changed.wait_for(lock, config_.timeout, [&] { return push.pushed >= chunks || push.error; });
  if (push.error) std::rethrow_exception(push.error);
  if (!done)
    throw Error(Errc::timeout, "update engine '" + config_.name + "': the previous exchange's push of chunk " +
                                   std::to_string(chunks - 1) + " did not finish in time");
}

// The last exchange's push, finished (its error, if any, thrown here).
void EngineCore::finish_pending() {
  auto push = std::move(seasgd_push_);
  if (!push) return;
  push->task.get();
  std::lock_guard lock(push->mutex);
  if (push->error) std::rethrow_exception(push->error);
}

}  // namespace smb::detail
