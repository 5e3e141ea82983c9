#pragma once
// The daemon's side of the tcp transport: a listening socket and one thread
// per client connection, blocked in recv() until the next request. A
// write's payload is received straight into the segment and a read's data
// is sent straight from it (the kernel's copy only); atomics and calls run
// on that thread (calls answer from any thread: replies queued by other
// threads go out with the connection's next send, or at once when it is
// idle). A client that stops taking its replies stalls only its own
// connection, and is cut off once a send made no progress for kSendStall.
#include "transport/channel_admission.hpp"
#include "transport/tcp/tcp_wire.hpp"
#include "transport/transport.hpp"
#include "util/fd.hpp"
#include "util/service_thread.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace smb::transport::tcp {

class TcpServerTransport final : public ServerTransport {
 public:
  explicit TcpServerTransport(std::uint16_t port);
  ~TcpServerTransport() override;

  std::string name() const override { return "tcp"; }
  const Bytes& address() const override { return address_; }
  // Nothing to register: clients name a segment by its id, and the server's
  // own CPU moves the bytes.
  std::unique_ptr<Registration> register_pool(void*, std::size_t) override { return nullptr; }
  std::unique_ptr<Registration> register_memory(void* base, std::size_t length) override;
  void start(SegmentResolver resolver, CallHandler calls, const ServerTuning& tuning,
             ChannelAdmission admission) override;
  void stop() override;
  const ServerTraffic* traffic() const override { return &traffic_; }

 private:
  class Connection;  // tcp_server.cpp
  void accept_loop(const std::stop_token& stop);
  void serve(Connection& c);
  bool handshake(Connection& c);
  bool serve_request(Connection& c, const RequestHeader& h);
  void reap();          // joins the threads of connections that ended
  void drop_revoked();  // cuts off connections whose session closed

  util::UniqueFd listener_;
  Bytes address_;
  SegmentResolver resolver_;
  CallHandler calls_;
  ChannelAdmission admission_;
  std::uint64_t revocations_seen_ = 0;
  ServerTraffic traffic_;
  std::mutex mutex_;  // guards connections_
  std::map<Connection*, std::shared_ptr<Connection>> connections_;
  util::ServiceThread thread_;  // last: stopped before the members its loop uses go
};

}  // namespace smb::transport::tcp
