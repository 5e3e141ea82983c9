// The update engine's synchronous exchange, pipelined (the BytePS argument):
// every root adds W/groups into the current sum chunk by chunk while it reads
// back the chunks that every root has added already, so a worker's link
// carries the push and the pull at the same time (full duplex) instead of
// one after the other, and the servers add as the chunks come. A chunk is a
// few stripes on every server (chunk_floats), so each push and each read
// keeps every server's link busy, not one server's at a time.
//
//   push lanes:   for chunk k: sum[k] += W[k]/groups (axpy, x inline);
//                 then ready[k] += 1 (an atomic on the fabric). Two lanes
//                 (even and odd chunks), so that a chunk is on the wire
//                 while the servers add the one before and answer: with
//                 one, every link idled a round trip per chunk.
//   this thread:  for chunk k: wait until ready[k] = groups x (exchange+1);
//                 read sum[k] into W[k], asynchronously, one chunk ahead
//                 (the same reason)
//   then          group 0 copies the sum into the global weights (while the
//                 last reads come back); barrier; group 0 zeroes the sum in
//                 the background (both on the servers: no bytes on the
//                 network)
//
// The counters only grow (one add per root and exchange), so nothing resets
// them; the sums alternate, so the one just read is zeroed while the next
// exchange adds into the other.
#include "engine_core.hpp"

#include <algorithm>
#include <chrono>
#include <deque>
#include <future>
#include <thread>
#include <vector>

namespace smb::detail {

namespace {
constexpr std::uint64_t kPushLanes = 2;  // chunks pushed at once
constexpr std::size_t kReadsAhead = 1;   // chunk reads in flight besides the one waited for
std::span<const std::byte> bytes_of(std::span<const float> v) { return std::as_bytes(v); }
std::span<std::byte> bytes_of(std::span<float> v) { return std::as_writable_bytes(v); }
}  // namespace

std::uint64_t EngineCore::sync_chunks() const {
  const std::uint64_t per_chunk = chunk_floats();
  return (config_.parameters + per_chunk - 1) / per_chunk;
}

void EngineCore::create_sync_buffers() {
  const auto& c = config_;
  for (int k = 0; k < 2; ++k)
    sums_[k] = client_.open_or_create(c.name + "/sum/" + std::to_string(k), bytes_, fabric_buffers());
  ready_ = client_.open_or_create(c.name + "/ready", sync_chunks() * sizeof(std::uint64_t), fabric_buffers());
  if (c.group != 0) return;
  for (auto& sum : sums_) sum.apply(VectorOp::scale, DType::f32, 0, c.parameters, 0.0);
  const std::vector<std::byte> zeros(ready_.size());
  ready_.write(0, zeros);
}

void EngineCore::synchronous_exchange(std::span<float> params) {
  const auto& c = config_;
  if (zeroing_.valid()) zeroing_.get();  // the other sum's, from the exchange before
  auto& sum = sums_[exchanges_ % 2];
  const std::uint64_t chunks = sync_chunks();
  const std::uint64_t per_chunk = chunk_floats();
  const std::uint64_t target = static_cast<std::uint64_t>(c.groups) * (exchanges_ + 1);
  auto chunk = [&](std::uint64_t k) {
    const std::uint64_t first = k * per_chunk;
    return std::pair{first, std::min(per_chunk, c.parameters - first)};
  };
  auto lane = [&](std::uint64_t from) {
    for (std::uint64_t k = from; k < chunks; k += kPushLanes) {
      const auto [first, count] = chunk(k);
      sum.apply(VectorOp::axpy, DType::f32, first * sizeof(float), count, 1.0 / c.groups,
                bytes_of(std::span<const float>(params).subspan(first, count)));
      ready_.fetch_add(k * sizeof(std::uint64_t), 1);
    }
  };
  std::vector<std::future<void>> push;
  for (std::uint64_t l = 0; l < kPushLanes; ++l) push.push_back(std::async(std::launch::async, lane, l));
  const auto wait_pushes = [&] {
    for (auto& p : push)
      if (p.valid()) p.wait();
  };
  // Reads overwrite params chunk by chunk: a chunk is read only after this
  // root's own push of it is counted, so its x has been sent already.
  std::deque<Request> reads;  // in flight, oldest first
  std::future<void> copy_out;
  try {
    const auto deadline = std::chrono::steady_clock::now() + c.timeout;
    for (std::uint64_t k = 0; k < chunks; ++k) {
      auto pause = std::chrono::microseconds(20);
      while (ready_.fetch_add(k * sizeof(std::uint64_t), 0) < target) {
        if (std::chrono::steady_clock::now() > deadline)
          throw Error(Errc::timeout, "update engine '" + c.name + "': synchronous exchange " +
                                         std::to_string(exchanges_) + ": not every group pushed chunk " +
                                         std::to_string(k) + " in time");
        watch_->check("synchronous exchange");
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(1000));
      }
      const auto [first, count] = chunk(k);
      reads.push_back(sum.read_async(first * sizeof(float), bytes_of(params.subspan(first, count))));
      if (reads.size() > kReadsAhead) {
        reads.front().wait();
        reads.pop_front();
      }
    }
    // The sum is complete (every chunk counted): group 0 makes it the global
    // weights before the barrier, so that every root finds them there after
    // it; the servers copy while the last chunks come back.
    if (c.group == 0)
      copy_out = std::async(std::launch::async, [&] {
        global_.apply_from(VectorOp::copy, DType::f32, 0, c.parameters, 1.0, sum, 0);
      });
    for (auto& r : reads) r.wait();
    reads.clear();
  } catch (...) {
    for (auto& r : reads) {  // they write params
      try {
        r.wait();
      } catch (...) {
      }
    }
    wait_pushes();  // they read params
    if (copy_out.valid()) copy_out.wait();
    throw;
  }
  for (auto& p : push) p.get();
  if (c.group == 0) copy_out.get();
  watch_->barrier(client_, c.name + "/sum-read", c.groups, "synchronous exchange");
  // Zeroed for its next use two exchanges on, which every root reaches only
  // after the next exchange's barrier, which group 0 enters only after this
  // is done (the top): off this exchange's tail.
  if (c.group == 0)
    zeroing_ = std::async(std::launch::async, [&sum, n = c.parameters] {
      sum.apply(VectorOp::scale, DType::f32, 0, n, 0.0);
    });
}

}  // namespace smb::detail
