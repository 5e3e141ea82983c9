#pragma once
// smbd's Prometheus metrics (`smbd --metrics HOST:PORT`, GET /metrics in
// the text format, served by prometheus-cpp). What smbd can see:
//  - every request it answers, by message type: count, errors by code and a
//    latency histogram from arrival to answer (so lock, barrier and version
//    waits show as the time clients waited);
//  - vector ops by op and element type, and the bytes they covered;
//  - what its transport moved for clients (server-assisted reads, writes,
//    atomics: UCX active messages; one-sided RMA and native verbs bypass the
//    server's CPU and are counted by clients, not here);
//  - clients connected, capacity, used, largest free, buffers, and the bytes
//    of each buffer (the first kMaxBufferSeries by name: bounded series).
// Counters are updated where requests are served (any thread); the gauges
// are sampled from the event loop once a second (ControlServer).
#include "replies.hpp"
#include "transport/transport.hpp"

#include <smb/client.hpp>
#include <smb/error.hpp>
#include <smb/vector_ops.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace prometheus {
class Counter;
class Exposer;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace smb::server {

class Metrics {
 public:
  static constexpr std::size_t kMaxBufferSeries = 1000;

  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // The transport's running totals (null: it moves nothing through smbd's
  // CPU). Set once, before requests are served.
  void count_traffic(const transport::ServerTraffic* traffic) { traffic_ = traffic; }

  // Starts serving /metrics on HOST:PORT. Throws smb::Error(unreachable)
  // when it cannot listen there.
  void serve(const std::string& listen);
  bool serving() const { return exposer_ != nullptr; }

  // `reply`, made to record the request when it is answered.
  ReplyFn timed(std::uint16_t type, ReplyFn reply);
  void request(std::uint16_t type, Errc code, std::chrono::steady_clock::duration took);
  void vector_op(VectorOp op, DType dtype, std::uint64_t bytes);

  struct Sample {
    std::uint64_t capacity = 0, used = 0, largest_free = 0, populated = 0, clients = 0, buffers = 0;
    std::vector<std::pair<std::string, std::uint64_t>> buffer_bytes;
  };
  void sample(const Sample& now);

  // Running totals since start, for `stat` (smbctl top computes rates).
  ServerActivity totals() const;

 private:
  static constexpr std::size_t kTypes = 64;   // message types (protocol/message_schema.hpp) fit below
  static_assert(protocol::kLastMessage < kTypes);
  static constexpr std::size_t kOps = 8, kDTypes = 10;

  const transport::ServerTraffic* traffic_ = nullptr;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::array<prometheus::Counter*, kTypes> requests_{};
  std::array<prometheus::Histogram*, kTypes> latency_{};
  prometheus::Family<prometheus::Counter>* errors_ = nullptr;
  std::array<std::array<prometheus::Counter*, kDTypes>, kOps> vector_ops_{}, vector_bytes_{};
  prometheus::Gauge *capacity_, *used_, *largest_free_, *populated_, *clients_, *buffers_;
  prometheus::Counter *transport_written_, *transport_read_, *transport_atomics_;
  std::uint64_t seen_written_ = 0, seen_read_ = 0, seen_atomics_ = 0;
  prometheus::Family<prometheus::Gauge>* buffer_bytes_ = nullptr;
  std::map<std::string, prometheus::Gauge*> buffer_series_;  // sampled on the event loop only
  std::atomic<std::uint64_t> requests_total_{0}, errors_total_{0}, vector_ops_total_{0}, vector_bytes_total_{0};
};

}  // namespace smb::server
