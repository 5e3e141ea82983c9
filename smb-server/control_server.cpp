#include "control_server.hpp"

#include "control_session.hpp"
#include "protocol/credential.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

namespace smb::server {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {
constexpr auto kLogInterval = std::chrono::seconds(10);
constexpr auto kMinAcceptBackoff = std::chrono::milliseconds(10);
constexpr auto kMaxAcceptBackoff = std::chrono::milliseconds(1000);
}  // namespace

ControlServer::ControlServer(asio::io_context& io, const tcp::endpoint& listen, Registry& registry,
                             ServerIdentity& identity, const ConnectionLimits& limits, const SessionQuotas& quotas,
                             const transport::TransportOptions& transport_options, bool may_pull_copies)
    : io_(io),
      acceptor_(io),
      registry_(registry),
      limits_(limits),
      handler_(registry, identities_, identity, clients_, metrics_),
      coordination_(io, quotas.locks, quotas.lock_grace),
      versions_(io, registry),
      barriers_(io),
      pauses_(io, registry, identities_),
      // No transport: pull_copy fails with Errc::transport (the repairer copies itself).
      puller_(may_pull_copies ? identity.transport : std::string(), transport_options, registry.store()),
      workers_(std::max(1u, std::thread::hardware_concurrency())),
      metrics_sampler_(io),
      accept_retry_(io) {
  acceptor_.open(listen.protocol());
  acceptor_.set_option(tcp::acceptor::reuse_address(true));
  acceptor_.bind(listen);  // throws boost::system::system_error (e.g. address in use)
  acceptor_.listen();
}

ControlServer::~ControlServer() { workers_.join(); }

void ControlServer::start() {
  accept();
  asio::post(workers_, [this] { puller_.warm(); });  // a repair may come first thing
}

void ControlServer::serve_metrics(const std::string& listen) {
  metrics_.serve(listen);
  sample_metrics();
}

// On the io thread, where the registry and the sessions are kept.
void ControlServer::sample_metrics() {
  const auto stats = registry_.store().stats();
  Metrics::Sample now;
  now.capacity = stats.capacity;
  now.used = stats.used;
  now.largest_free = stats.largest_free;
  now.populated = stats.populated;
  now.clients = clients_.load();
  now.buffers = stats.buffer_count;
  for (const auto& b : registry_.store().buffers("", Metrics::kMaxBufferSeries).items) now.buffer_bytes.emplace_back(b.name, b.bytes);
  metrics_.sample(now);
  metrics_sampler_.expires_after(std::chrono::seconds(1));
  metrics_sampler_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) sample_metrics();
  });
}

void ControlServer::accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec) return accept_failed(ec);
    accept_backoff_ = std::chrono::milliseconds(0);
    if (sessions_.size() >= limits_.max_connections) {
      ++refused_unlogged_;
      const auto now = std::chrono::steady_clock::now();
      if (now - last_refused_log_ >= kLogInterval) {
        spdlog::warn("refused {} connection(s): {} clients connected, the limit (smbd --max-connections)",
                     refused_unlogged_, sessions_.size());
        last_refused_log_ = now;
        refused_unlogged_ = 0;
      }
      // Closed at once: the client sees the connection end, not a hang.
      boost::system::error_code ignored;
      socket.close(ignored);
      return accept();
    }
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto session = std::make_shared<ControlSession>(*this, std::move(socket), next_session_++);
    clients_ += 1;
    sessions_.insert(session);
    session->start();
    accept();
  });
}

void ControlServer::accept_failed(const boost::system::error_code& ec) {
  if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
  accept_backoff_ = std::clamp(accept_backoff_ * 2, std::chrono::milliseconds(kMinAcceptBackoff),
                               std::chrono::milliseconds(kMaxAcceptBackoff));
  ++accept_errors_unlogged_;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_accept_log_ >= kLogInterval) {
    spdlog::warn("accepting a client failed: {} ({} time(s) in the last {} s); retrying, at most every {} ms{}",
                 ec.message(), accept_errors_unlogged_, kLogInterval.count(), kMaxAcceptBackoff.count(),
                 ec == asio::error::no_descriptors ? " (out of file descriptors: lower --max-connections or raise "
                                                     "the open-file limit, ulimit -n)"
                                                   : "");
    last_accept_log_ = now;
    accept_errors_unlogged_ = 0;
  }
  accept_retry_.expires_after(accept_backoff_);
  accept_retry_.async_wait([this](const boost::system::error_code& wait_ec) {
    if (!wait_ec && acceptor_.is_open()) accept();
  });
}

void ControlServer::session_ended(const std::shared_ptr<ControlSession>& session) {
  registry_.session_closed(session->id());
  coordination_.session_closed(session->id());
  versions_.session_closed(session->id());
  barriers_.session_closed(session->id());
  pauses_.session_closed(session->id());
  identities_.session_closed(session->id());
  tickets_.revoke(session->id());  // its data channels are served no more
  clients_ -= 1;
  sessions_.erase(session);
}

void ControlServer::shutdown() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  accept_retry_.cancel();
  metrics_sampler_.cancel();
  for (const auto& s : std::set(sessions_)) s->close();
}

void ControlServer::serve(SessionId session, const std::string& scope, std::uint16_t type,
                          std::span<const std::uint8_t> body, ReplyFn reply) {
  reply = reply_once(metrics_.timed(type, std::move(reply)));
  guarded(type, reply, [&] {
    const Route& route = route_for(type, kControl);
    Request request{session, type, protocol::decode_body(body), scope};
    // A credential's session names nothing outside its prefix: every
    // request that names a buffer (or a segment, a lock) calls it "name".
    if (!scope.empty())
      if (auto name = request.body.find("name"); name != request.body.end() && name->is_string())
        protocol::check_scope(name->get_ref<const std::string&>(), scope, protocol::message_name(type));
    route.handler(services_, request, reply);
  });
}

}  // namespace smb::server
