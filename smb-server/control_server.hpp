#pragma once
// The control plane: a Boost.Asio TCP server, one ControlSession per client
// connection, one request at a time per session. Every request goes through
// serve() (a session's) or serve_call() (a data-path call's), which answer
// exactly once whatever the request holds.
#include "channel_tickets.hpp"
#include "coordination.hpp"
#include "limits.hpp"
#include "message_routes.hpp"
#include "request_handler.hpp"

#include <boost/asio.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <set>

namespace smb::server {

class ControlSession;

class ControlServer {
 public:
  ControlServer(boost::asio::io_context& io, const boost::asio::ip::tcp::endpoint& listen,
                Registry& registry, ServerIdentity& identity, const ConnectionLimits& limits,
                const SessionQuotas& quotas, const transport::TransportOptions& transport_options = {},
                bool may_pull_copies = true);
  ~ControlServer();
  boost::asio::ip::tcp::endpoint local_endpoint() const { return acceptor_.local_endpoint(); }
  void start();
  // Closes the listener and every session.
  void shutdown();
  // A call that came over the data path (transport.hpp): vector ops, version
  // reads and waits, barriers, a replicated buffer's atomics. Runs on the
  // transport's thread; answers through `respond`.
  // `scope`: the calling channel's (transport.hpp's CallHandler).
  void serve_call(transport::Bytes frame, transport::Bytes payload, std::string_view scope,
                  transport::Respond respond);

  // For sessions (io thread). Serves one request; `reply` is called exactly
  // once, on the io thread, with an ok or error reply. Never throws.
  // `scope`: the session's credential prefix (empty: every name).
  void serve(SessionId session, const std::string& scope, std::uint16_t type, std::span<const std::uint8_t> body,
             ReplyFn reply);
  void session_ended(const std::shared_ptr<ControlSession>& session);
  const ConnectionLimits& limits() const { return limits_; }
  // The tickets binding each session's data channels to it (a greeted
  // session gets one in its hello reply; revoked when it ends).
  ChannelTickets& tickets() { return tickets_; }
  // A new --auth-token-file secret (SIGHUP), for the next hellos; sessions
  // already in keep theirs. On the event loop, as the hellos are.
  void set_auth_secret(std::string secret) { limits_.auth_secret = std::move(secret); }
  // What smbd counts (metrics.hpp): reported by `stat`, and served to
  // Prometheus by serve_metrics (HOST:PORT; throws smb::Error when it
  // cannot listen there).
  Metrics& metrics() { return metrics_; }
  void serve_metrics(const std::string& listen);

 private:
  void accept();
  void accept_failed(const boost::system::error_code& ec);
  void sample_metrics();
  // A vector_call, version_call, barrier_call or atomic_call (fixed binary
  // bodies, data_path_calls.cpp).
  void serve_fixed_call(const protocol::Header& header, std::span<const std::uint8_t> body, transport::Bytes payload,
                         std::string_view scope, transport::Respond respond);

  boost::asio::io_context& io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  Registry& registry_;
  ConnectionLimits limits_;
  std::atomic<std::uint32_t> clients_{0};
  ChannelTickets tickets_;
  Metrics metrics_;
  ClientIdentities identities_;  // each session's client (hello's id)
  RequestHandler handler_;
  Coordination coordination_;  // deferred replies: locks, barriers
  VersionWaits versions_;      // deferred replies: version waits
  Barriers barriers_;          // deferred replies: barriers
  RepairPauses pauses_;        // deferred replies: online repair's pauses
  CopyPuller puller_;          // a repair's copies pulled from other smbd (on workers_)
  // Vector ops run here, off the io thread, so that one large op does not
  // stall every other client's control requests.
  boost::asio::thread_pool workers_;
  Services services_{io_, metrics_, workers_, handler_, coordination_, versions_, barriers_, pauses_, puller_};
  // Samples the gauges of metrics_ once a second while they are served.
  boost::asio::steady_timer metrics_sampler_;
  std::set<std::shared_ptr<ControlSession>> sessions_;  // touched only on the io thread
  SessionId next_session_ = 1;
  // Accept errors (EMFILE...) are retried after a growing pause and logged
  // once per interval, so that running out of descriptors neither spins a
  // core nor floods the log.
  boost::asio::steady_timer accept_retry_;
  std::chrono::milliseconds accept_backoff_{0};
  std::chrono::steady_clock::time_point last_accept_log_{};
  std::uint64_t accept_errors_unlogged_ = 0;
  std::uint64_t refused_unlogged_ = 0;
  std::chrono::steady_clock::time_point last_refused_log_{};
};

}  // namespace smb::server
