#include "transport/tcp/tcp_server.hpp"

#include "transport/tcp/tcp_socket.hpp"

#include <spdlog/spdlog.h>

#include <poll.h>
#include <sys/socket.h>

#include <cstring>
#include <vector>

namespace smb::transport::tcp {

namespace {
using namespace std::chrono_literals;

// A connection whose client sends nothing of its hello for this long is closed.
constexpr auto kHelloWithin = 5000ms;
// A send that moves no byte for this long means the client stopped taking
// its replies: it is cut off (the bound on what a client makes smbd hold).
constexpr auto kSendStall = 30000ms;
// Connections served at once (a thread each); more are refused.
constexpr std::size_t kMaxConnections = 4096;

class EmptyRegistration final : public Registration {
 public:
  const Bytes& remote_key() const override { return key_; }

 private:
  Bytes key_;
};
}  // namespace

RequestCheck check_request(const SegmentResolver& resolver, std::string_view scope, const RequestHeader& h,
                           SegmentAccess& access) {
  switch (static_cast<Kind>(h.kind)) {
    case Kind::put: {
      const Errc e = check_range(resolver, scope, h.segment_id, h.offset, h.length, access);
      return {e, e == Errc::ok ? 0 : h.length, false};
    }
    case Kind::get:
      return {check_range(resolver, scope, h.segment_id, h.offset, h.length, access), 0, false};
    case Kind::atomic:
      return {check_atomic(resolver, scope, atomic_request(h), access),
              0, false};
    case Kind::call:
      if (h.frame_length > kMaxCallFrame || h.length > kMaxCallPayload) return {Errc::protocol, 0, true};
      return {};
  }
  return {Errc::protocol, 0, true};  // not a request: the stream cannot be trusted any more
}

// One client connection. Sends are whole messages under send_mutex; a reply
// from another thread that finds it taken is queued, and whoever holds the
// mutex sends the queue before it lets go (flush), so no thread waits on a
// client's slow link but the connection's own. Another thread (the worker
// pool answering a call) never blocks on the socket: a reply it cannot hand
// to the kernel at once means the client stopped reading replies that are
// a few dozen bytes each, and it is cut off (the bound reply_queue.hpp
// states for every transport).
class TcpServerTransport::Connection : public std::enable_shared_from_this<Connection> {
 public:
  explicit Connection(util::UniqueFd socket) : fd(std::move(socket)) {}

  // Sends a reply now (the connection's thread); false once the client is cut off.
  bool send(const ReplyHeader& h, const void* data, std::size_t length) {
    bool ok;
    {
      std::lock_guard lock(send_mutex);
      ok = send_locked(h, data, length, true);
    }
    flush(true);
    return ok;
  }
  // A call's reply, from any thread; `own_thread`: the connection's (which may block).
  void queue_reply(std::uint64_t token, Bytes frame, bool own_thread) {
    {
      std::lock_guard lock(queue_mutex);
      queued.push_back(Queued{token, std::move(frame)});
    }
    flush(own_thread);
  }
  void cut_off() {
    cut.store(true, std::memory_order_relaxed);
    ::shutdown(fd.get(), SHUT_RDWR);
  }

  bool admitted(const ChannelAdmission& admission) {
    std::lock_guard lock(ticket_mutex);
    return has_ticket && ticket.admitted(admission);
  }
  // The names this channel reaches start with it; fixed once its handshake
  // admitted it (channel_admission.hpp), so read by its thread unlocked.
  const std::string& scope() const { return ticket.scope(); }
  // A ticket was presented and its session has closed (a connection still
  // in its hello is not: its own thread checks the ticket when it comes).
  bool revoked(const ChannelAdmission& admission) {
    std::lock_guard lock(ticket_mutex);
    return has_ticket && !ticket.admitted(admission);
  }
  void set_ticket(std::span<const std::uint8_t> bytes) {
    std::lock_guard lock(ticket_mutex);
    ticket = AdmittedTicket(bytes);
    has_ticket = true;
  }

  util::UniqueFd fd;
  std::thread thread;
  std::atomic<bool> finished{false};

 private:
  std::atomic<bool> cut{false};
  struct Queued {
    std::uint64_t token;
    Bytes frame;
  };
  bool send_locked(const ReplyHeader& h, const void* data, std::size_t length, bool may_block) {
    const iovec parts[2] = {{const_cast<ReplyHeader*>(&h), sizeof h}, {const_cast<void*>(data), length}};
    const bool sent = may_block ? send_all(fd.get(), parts)
                                : send_from(fd.get(), parts, 0, MSG_DONTWAIT) == static_cast<long>(sizeof h + length);
    if (sent) return true;
    if (!may_block && !cut.load(std::memory_order_relaxed))
      spdlog::warn("tcp transport: a client does not read its replies; cutting it off");
    cut_off();
    return false;
  }
  // Sends what other threads queued, unless another thread holds the send
  // mutex: that one looks at the queue again after it lets go.
  void flush(bool may_block) {
    for (;;) {
      {
        std::unique_lock lock(send_mutex, std::try_to_lock);
        if (!lock) return;
        for (;;) {
          std::vector<Queued> batch;
          {
            std::lock_guard q(queue_mutex);
            batch.swap(queued);
          }
          if (batch.empty()) break;
          for (auto& r : batch) {
            ReplyHeader h;
            h.token = r.token;
            h.length = r.frame.size();
            send_locked(h, r.frame.data(), r.frame.size(), may_block);
          }
        }
      }
      std::lock_guard q(queue_mutex);
      if (queued.empty()) return;  // else queued while we let go, and its thread found the mutex taken
    }
  }

  std::mutex send_mutex;
  std::mutex queue_mutex;
  std::vector<Queued> queued;
  std::mutex ticket_mutex;
  AdmittedTicket ticket;
  bool has_ticket = false;
};

TcpServerTransport::TcpServerTransport(std::uint16_t port) : listener_(listen_any(port)) {
  WireAddress a;
  a.port = local_port(listener_.get());
  address_.resize(sizeof a);
  std::memcpy(address_.data(), &a, sizeof a);
  spdlog::info("tcp transport: data port {}", a.port);
}

TcpServerTransport::~TcpServerTransport() { stop(); }

std::unique_ptr<Registration> TcpServerTransport::register_memory(void*, std::size_t) {
  return std::make_unique<EmptyRegistration>();
}

void TcpServerTransport::start(SegmentResolver resolver, CallHandler calls, const ServerTuning& /*tuning*/,
                               ChannelAdmission admission) {
  // Threads block in the kernel until a request comes: there is no loop to
  // tune (ServerTuning is for polling transports).
  resolver_ = std::move(resolver);
  calls_ = std::move(calls);
  admission_ = std::move(admission);
  thread_.start([this](const std::stop_token& stop) { accept_loop(stop); });
}

void TcpServerTransport::stop() {
  thread_.stop();
  std::map<Connection*, std::shared_ptr<Connection>> all;
  {
    std::lock_guard lock(mutex_);
    all.swap(connections_);
  }
  for (auto& [raw, c] : all) c->cut_off();
  for (auto& [raw, c] : all)
    if (c->thread.joinable()) c->thread.join();
}

void TcpServerTransport::accept_loop(const std::stop_token& stop) {
  while (!stop.stop_requested()) {
    pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {thread_.wake_fd(), POLLIN, 0}};
    const int n = ::poll(fds, 2, 1000);
    if (fds[1].revents != 0) thread_.clear_wake();
    reap();
    if (revoked_since(admission_, revocations_seen_)) drop_revoked();
    if (n <= 0 || (fds[0].revents & POLLIN) == 0) continue;
    util::UniqueFd socket(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!socket) continue;
    std::lock_guard lock(mutex_);
    if (connections_.size() >= kMaxConnections) {
      spdlog::warn("tcp transport: {} connections already; refusing another", connections_.size());
      continue;
    }
    tune(socket.get(), kSendStall, kHelloWithin);
    auto c = std::make_shared<Connection>(std::move(socket));
    Connection* raw = c.get();
    connections_.emplace(raw, std::move(c));
    raw->thread = std::thread([this, raw] {
      serve(*raw);
      raw->finished.store(true, std::memory_order_release);
      thread_.wake();  // to be reaped
    });
  }
}

void TcpServerTransport::reap() {
  std::vector<std::shared_ptr<Connection>> done;
  {
    std::lock_guard lock(mutex_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (it->second->finished.load(std::memory_order_acquire)) {
        done.push_back(std::move(it->second));
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : done) c->thread.join();
}

void TcpServerTransport::drop_revoked() {
  std::lock_guard lock(mutex_);
  for (auto& [raw, c] : connections_)
    if (c->revoked(admission_)) c->cut_off();
}

bool TcpServerTransport::handshake(Connection& c) {
  Hello hello;
  if (!recv_all(c.fd.get(), &hello, sizeof hello)) return false;
  HelloReply reply;
  if (hello.magic != kMagic || hello.version != kVersion || hello.ticket_length > kMaxTicket) {
    reply.status = static_cast<std::int32_t>(Errc::protocol);
    ::send(c.fd.get(), &reply, sizeof reply, MSG_NOSIGNAL);
    return false;
  }
  std::vector<std::uint8_t> ticket(hello.ticket_length);
  if (!recv_all(c.fd.get(), ticket.data(), ticket.size())) return false;
  c.set_ticket(ticket);
  const bool ok = c.admitted(admission_);
  reply.status = static_cast<std::int32_t>(ok ? Errc::ok : Errc::permission_denied);
  if (::send(c.fd.get(), &reply, sizeof reply, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof reply)) return false;
  return ok;
}

void TcpServerTransport::serve(Connection& c) {
  if (handshake(c)) {
    tune(c.fd.get(), kSendStall, std::chrono::milliseconds(0));  // requests may be far apart
    RequestHeader h;
    while (recv_all(c.fd.get(), &h, sizeof h))
      if (!serve_request(c, h)) break;
  }
  c.cut_off();  // the client sees the end now; the socket closes when the connection is reaped
}

// False when the connection must close.
bool TcpServerTransport::serve_request(Connection& c, const RequestHeader& h) {
  ReplyHeader reply;
  reply.token = h.token;
  if (!c.admitted(admission_)) {  // its session closed: refuse, then close
    reply.status = static_cast<std::int32_t>(Errc::permission_denied);
    c.send(reply, nullptr, 0);
    return false;
  }
  SegmentAccess access;
  const RequestCheck check = check_request(resolver_, c.scope(), h, access);
  if (check.error != Errc::ok) {
    if (check.drain != 0 && !discard(c.fd.get(), check.drain)) return false;
    reply.status = static_cast<std::int32_t>(check.error);
    return c.send(reply, nullptr, 0) && !check.close;
  }
  switch (static_cast<Kind>(h.kind)) {
    case Kind::put:
      // Straight into the segment: the kernel's copy is the only one.
      if (!recv_all(c.fd.get(), access.base + h.offset, h.length)) return false;
      traffic_.bytes_written.fetch_add(h.length, std::memory_order_relaxed);
      return c.send(reply, nullptr, 0);
    case Kind::get:
      traffic_.bytes_read.fetch_add(h.length, std::memory_order_relaxed);
      reply.length = h.length;
      return c.send(reply, access.base + h.offset, h.length);
    case Kind::atomic: {
      const std::uint64_t old = apply_atomic(atomic_request(h), access);
      traffic_.atomics.fetch_add(1, std::memory_order_relaxed);
      reply.length = sizeof old;
      return c.send(reply, &old, sizeof old);
    }
    case Kind::call: {
      Bytes frame(h.frame_length);
      Bytes payload(static_cast<std::size_t>(h.length));
      if (!recv_all(c.fd.get(), frame.data(), frame.size()) || !recv_all(c.fd.get(), payload.data(), payload.size()))
        return false;
      calls_(std::move(frame), std::move(payload), c.scope(),
             [weak = c.weak_from_this(), token = h.token, own = std::this_thread::get_id()](Bytes reply_frame) {
               if (auto alive = weak.lock())
                 alive->queue_reply(token, std::move(reply_frame), std::this_thread::get_id() == own);
             });
      return true;
    }
  }
  return false;
}

}  // namespace smb::transport::tcp
