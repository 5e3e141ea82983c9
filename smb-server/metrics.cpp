#include "metrics.hpp"

#include "protocol/messages.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <set>

namespace smb::server {

namespace {
// 10 us to 10 s: a small call on shared memory to a long lock or barrier wait.
const prometheus::Histogram::BucketBoundaries kLatencyBuckets = {
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1, 0.5, 1, 5, 10};

prometheus::Gauge& gauge(prometheus::Registry& registry, const std::string& name, const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}
}  // namespace

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& requests = prometheus::BuildCounter()
                       .Name("smb_requests_total")
                       .Help("Requests answered, by message type (control connections and data-path calls)")
                       .Register(*registry_);
  auto& latency = prometheus::BuildHistogram()
                      .Name("smb_request_duration_seconds")
                      .Help("From a request's arrival to its answer, by message type; for lock, barrier_call and "
                            "a version_call that waits this is the time the client waited")
                      .Register(*registry_);
  for (std::uint16_t type = 1; type < kTypes; ++type) {
    const std::string name = protocol::message_name(type);
    if (name.rfind("unknown", 0) == 0 || name.empty()) continue;
    requests_[type] = &requests.Add({{"message", name}});
    latency_[type] = &latency.Add({{"message", name}}, kLatencyBuckets);
  }
  errors_ = &prometheus::BuildCounter()
                 .Name("smb_request_errors_total")
                 .Help("Requests answered with an error, by message type and error (timeout: a lock, barrier or "
                       "version wait ran out)")
                 .Register(*registry_);
  auto& ops = prometheus::BuildCounter()
                  .Name("smb_vector_ops_total")
                  .Help("Vector ops applied by this server's CPU, by op and element type")
                  .Register(*registry_);
  auto& op_bytes = prometheus::BuildCounter()
                       .Name("smb_vector_op_bytes_total")
                       .Help("Bytes of buffer the vector ops covered, by op and element type")
                       .Register(*registry_);
  for (std::size_t op = 1; op < kOps; ++op) {
    for (std::size_t dtype = 1; dtype < kDTypes; ++dtype) {
      const prometheus::Labels labels{{"op", vector_op_name(static_cast<VectorOp>(op))},
                                      {"dtype", dtype_name(static_cast<DType>(dtype))}};
      vector_ops_[op][dtype] = &ops.Add(labels);
      vector_bytes_[op][dtype] = &op_bytes.Add(labels);
    }
  }
  capacity_ = &gauge(*registry_, "smb_capacity_bytes", "Memory this server lends (--capacity)");
  used_ = &gauge(*registry_, "smb_used_bytes", "Bytes held by segments");
  largest_free_ = &gauge(*registry_, "smb_largest_free_bytes", "The largest segment that could be made now");
  populated_ = &gauge(*registry_, "smb_pool_populated_bytes",
                      "Bytes of the pool faulted in so far (smbd populates it in the background after start)");
  clients_ = &gauge(*registry_, "smb_clients", "Control connections open");
  buffers_ = &gauge(*registry_, "smb_buffers", "Segments held (a buffer's share of this server, per copy)");
  auto& transport = prometheus::BuildCounter()
                        .Name("smb_transport_bytes_total")
                        .Help("Bytes the transport moved for clients through this server's CPU (active messages: "
                              "TCP and other lanes without one-sided RMA); one-sided RMA is not seen here")
                        .Register(*registry_);
  transport_written_ = &transport.Add({{"direction", "write"}});
  transport_read_ = &transport.Add({{"direction", "read"}});
  transport_atomics_ = &prometheus::BuildCounter()
                            .Name("smb_transport_atomics_total")
                            .Help("Atomics done by this server's CPU for clients without an atomic lane")
                            .Register(*registry_)
                            .Add({});
  buffer_bytes_ = &prometheus::BuildGauge()
                       .Name("smb_buffer_bytes")
                       .Help("Bytes of each segment here (the first 1000 by name)")
                       .Register(*registry_);
}

Metrics::~Metrics() = default;

namespace {
// Why HOST:PORT cannot be listened on, in words: the HTTP server only says
// "null context when constructing CivetServer", so bind it ourselves to learn.
std::string why_not_listening(const std::string& listen, const std::string& fallback) {
  namespace ip = boost::asio::ip;
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) return fallback;
  boost::system::error_code ec;
  const auto address = ip::make_address(listen.substr(0, colon), ec);
  if (ec) return fallback;  // a host name: the HTTP server's own words
  unsigned long port = 0;
  try {
    port = std::stoul(listen.substr(colon + 1));
  } catch (const std::exception&) {
    return fallback;
  }
  if (port > 65535) return "port " + std::to_string(port) + " is not a TCP port (0-65535)";
  boost::asio::io_context io;
  ip::tcp::acceptor probe(io);
  const ip::tcp::endpoint at(address, static_cast<unsigned short>(port));
  probe.open(at.protocol(), ec);
  if (!ec) probe.bind(at, ec);
  if (ec == boost::asio::error::address_in_use)
    return "port " + std::to_string(port) + " is in use (another smbd's --metrics, or another program): give "
                                            "--metrics another port";
  if (ec == boost::system::errc::address_not_available)
    return listen.substr(0, colon) + " is not an address of this host";
  if (ec) return ec.message();
  return fallback;
}
}  // namespace

void Metrics::serve(const std::string& listen) {
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(listen, /*num_threads=*/1);
  } catch (const std::exception& e) {
    throw Error(Errc::unreachable, "--metrics " + listen + ": cannot listen there: " + why_not_listening(listen, e.what()));
  }
  exposer_->RegisterCollectable(registry_);
}

ReplyFn Metrics::timed(std::uint16_t type, ReplyFn reply) {
  return [this, type, start = std::chrono::steady_clock::now(), reply = std::move(reply)](protocol::Body body) {
    request(type, protocol::reply_errc(body), std::chrono::steady_clock::now() - start);
    reply(std::move(body));
  };
}

void Metrics::request(std::uint16_t type, Errc code, std::chrono::steady_clock::duration took) {
  if (type >= kTypes || requests_[type] == nullptr) return;
  requests_[type]->Increment();
  requests_total_.fetch_add(1, std::memory_order_relaxed);
  latency_[type]->Observe(std::chrono::duration<double>(took).count());
  if (code != Errc::ok) {
    errors_total_.fetch_add(1, std::memory_order_relaxed);
    std::string error = errc_name(code);  // "not found" -> not_found, as label values usually are
    std::replace(error.begin(), error.end(), ' ', '_');
    errors_->Add({{"message", protocol::message_name(type)}, {"error", error}}).Increment();
  }
}

void Metrics::vector_op(VectorOp op, DType dtype, std::uint64_t bytes) {
  const auto o = static_cast<std::size_t>(op), d = static_cast<std::size_t>(dtype);
  if (o >= kOps || d >= kDTypes || vector_ops_[o][d] == nullptr) return;
  vector_ops_total_.fetch_add(1, std::memory_order_relaxed);
  vector_bytes_total_.fetch_add(bytes, std::memory_order_relaxed);
  vector_ops_[o][d]->Increment();
  vector_bytes_[o][d]->Increment(static_cast<double>(bytes));
}

ServerActivity Metrics::totals() const {
  ServerActivity t;
  t.requests = requests_total_.load(std::memory_order_relaxed);
  t.errors = errors_total_.load(std::memory_order_relaxed);
  t.vector_ops = vector_ops_total_.load(std::memory_order_relaxed);
  t.vector_bytes = vector_bytes_total_.load(std::memory_order_relaxed);
  if (traffic_ != nullptr) {
    t.transport_bytes_written = traffic_->bytes_written.load(std::memory_order_relaxed);
    t.transport_bytes_read = traffic_->bytes_read.load(std::memory_order_relaxed);
  }
  return t;
}

void Metrics::sample(const Sample& now) {
  capacity_->Set(static_cast<double>(now.capacity));
  used_->Set(static_cast<double>(now.used));
  largest_free_->Set(static_cast<double>(now.largest_free));
  populated_->Set(static_cast<double>(now.populated));
  clients_->Set(static_cast<double>(now.clients));
  buffers_->Set(static_cast<double>(now.buffers));
  // The transport keeps running totals; the counters take what is new.
  const auto advance = [](prometheus::Counter* counter, std::uint64_t total, std::uint64_t& seen) {
    if (total > seen) counter->Increment(static_cast<double>(total - seen));
    seen = total;
  };
  if (traffic_ != nullptr) {
    advance(transport_written_, traffic_->bytes_written.load(std::memory_order_relaxed), seen_written_);
    advance(transport_read_, traffic_->bytes_read.load(std::memory_order_relaxed), seen_read_);
    advance(transport_atomics_, traffic_->atomics.load(std::memory_order_relaxed), seen_atomics_);
  }

  std::set<std::string> present;
  for (const auto& [name, bytes] : now.buffer_bytes) {
    auto& series = buffer_series_[name];
    if (series == nullptr) series = &buffer_bytes_->Add({{"buffer", name}});
    series->Set(static_cast<double>(bytes));
    present.insert(name);
  }
  for (auto it = buffer_series_.begin(); it != buffer_series_.end();) {
    if (present.contains(it->first)) {
      ++it;
    } else {
      buffer_bytes_->Remove(it->second);
      it = buffer_series_.erase(it);
    }
  }
}

}  // namespace smb::server
