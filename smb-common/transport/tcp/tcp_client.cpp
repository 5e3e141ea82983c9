#include "transport/tcp/tcp_client.hpp"

#include "transport/client_idle.hpp"
#include "transport/tcp/tcp_socket.hpp"
#include "util/parse.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace smb::transport::tcp {

namespace {
using namespace std::chrono_literals;

std::uint16_t decode_port(const Bytes& bytes, const std::string& peer) {
  WireAddress a;
  if (bytes.size() != sizeof a || std::memcmp(bytes.data(), a.magic, sizeof a.magic) != 0)
    throw Error(Errc::protocol, "server " + peer +
                                    ": its transport address is not a tcp one (start smbd with --transport tcp, "
                                    "or use the server's transport: unset SMB_TRANSPORT)");
  std::memcpy(&a, bytes.data(), sizeof a);
  return a.port;
}

std::string why(int error) { return error == 0 ? "the server closed it" : std::strerror(error); }
}  // namespace

// ---- the transport -------------------------------------------------------

std::unique_ptr<Channel> TcpClientTransport::connect(const Bytes& server_address, const std::string& peer,
                                                     std::span<const std::uint8_t> ticket) {
  return std::make_unique<TcpChannel>(*this, server_address, peer, ticket);
}

// Completions finish on the channels' receiver threads: a waiting caller has
// nothing to drive. It returns at once when any op finished since this
// thread last looked (the caller then checks its own), else it polls, then
// sleeps until one does (client_idle.hpp).
void TcpClientTransport::progress() {
  thread_local std::uint64_t last_seen = 0;
  std::unique_lock lock(mutex_);
  if (generation_ != last_seen) {
    last_seen = generation_;
    return;
  }
  lock.unlock();
  yield_when_idle(false, [this](std::chrono::microseconds limit) {
    std::unique_lock sleep(mutex_);
    ++sleepers_;
    idle_.wait_for(sleep, limit, [&] { return generation_ != last_seen; });
    --sleepers_;
    last_seen = generation_;
    return true;
  });
}

void TcpClientTransport::completed() {
  std::lock_guard lock(mutex_);
  ++generation_;
  if (sleepers_ > 0) idle_.notify_all();
}

void TcpClientTransport::abandon(const Completion& completion) {
  std::vector<TcpChannel*> channels;
  {
    std::lock_guard lock(mutex_);
    channels = channels_;
  }
  for (auto* c : channels) c->drop(completion);
}

void TcpClientTransport::add(TcpChannel* channel) {
  std::lock_guard lock(mutex_);
  channels_.push_back(channel);
}

void TcpClientTransport::remove(TcpChannel* channel) {
  std::lock_guard lock(mutex_);
  std::erase(channels_, channel);
}

// ---- a channel -----------------------------------------------------------

TcpChannel::TcpChannel(TcpClientTransport& transport, const Bytes& server_address, std::string peer,
                       std::span<const std::uint8_t> ticket)
    : transport_(transport), peer_(std::move(peer)) {
  const std::uint16_t port = decode_port(server_address, peer_);
  const std::string host = util::parse_host_port(peer_, /*allow_zero_port=*/true).host;
  host_port_ = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  if (ticket.size() > kMaxTicket) throw Error(Errc::invalid_argument, "server " + peer_ + ": ticket too long");
  for (Stream& s : streams_) open(s, host, port, ticket);
  transport_.add(this);
  for (Stream& s : streams_) {
    s.sender = std::thread([this, &s] { send_loop(s); });
    s.receiver = std::thread([this, &s] { receive_loop(s); });
  }
}

void TcpChannel::open(Stream& s, const std::string& host, std::uint16_t port, std::span<const std::uint8_t> ticket) {
  const auto within = util::connect_timeout();  // SMB_CONNECT_TIMEOUT
  s.fd = connect_to(host, port, within, peer_);
  tune(s.fd.get(), within, within);
  Hello hello;
  hello.ticket_length = static_cast<std::uint32_t>(ticket.size());
  const iovec parts[2] = {{&hello, sizeof hello}, {const_cast<std::uint8_t*>(ticket.data()), ticket.size()}};
  HelloReply reply;
  if (!send_all(s.fd.get(), parts) || !recv_all(s.fd.get(), &reply, sizeof reply))
    throw Error(Errc::unreachable, "server " + peer_ + ": its tcp data port " + host_port_ +
                                       " did not answer the hello: " + why(errno) +
                                       " (is smbd running there with --transport tcp?)");
  if (reply.magic != kMagic)
    throw Error(Errc::protocol, "server " + peer_ + ": " + host_port_ + " is not an smbd tcp data port");
  if (reply.status == static_cast<std::int32_t>(Errc::permission_denied))
    throw Error(Errc::permission_denied, "server " + peer_ +
                                             ": refused this client's data channel: its session's ticket is not "
                                             "admitted (the control session closed?)");
  if (reply.status != 0)
    throw Error(Errc::protocol, "server " + peer_ + ": refused the tcp hello (another smbd version?)");
  tune(s.fd.get(), 0ms, 0ms);  // replies may be far apart; the caller's deadline bounds every wait
}

TcpChannel::~TcpChannel() {
  shut_down();
  for (Stream& s : streams_) {
    {
      std::lock_guard lock(s.send_mutex);
      s.stopping = true;
    }
    s.send_cv.notify_all();
  }
  for (Stream& s : streams_) {
    if (s.sender.joinable()) s.sender.join();
    if (s.receiver.joinable()) s.receiver.join();
  }
  transport_.remove(this);
  std::lock_guard lock(mutex_);
  pending_.fail_all(Errc::server_gone, "server " + peer_ + ": channel closed");
}

void TcpChannel::shut_down() {
  for (Stream& s : streams_)
    if (s.fd) ::shutdown(s.fd.get(), SHUT_RDWR);
}

std::string TcpChannel::describe() const {
  return "tcp sockets to " + host_port_ + " (server-assisted; reads, atomics and the rest on three streams)";
}

std::unique_ptr<RemoteSegment> TcpChannel::attach(const SegmentDescriptor& segment) {
  return std::make_unique<TcpRemoteSegment>(segment);
}

ChannelCaps TcpChannel::caps() const {
  return ChannelCaps{.native_atomics = false,
                     .detects_peer_failure = true,
                     .registration_helps = false,
                     .max_call_payload = kMaxCallPayload};
}

TcpChannel::Outgoing TcpChannel::request(Kind kind, const RemoteSegment& seg, std::uint64_t offset,
                                         std::uint64_t length, const CompletionPtr& completion) {
  Outgoing out;
  out.completion = completion;
  out.header.kind = static_cast<std::uint32_t>(kind);
  out.header.segment_id = seg.descriptor().id;
  out.header.offset = offset;
  out.header.length = length;
  return out;
}

void TcpChannel::put(RemoteSegment& seg, std::uint64_t offset, const void* src, std::size_t length,
                     const CompletionPtr& completion) {
  Outgoing out = request(Kind::put, seg, offset, length, completion);
  out.data = src;
  out.data_length = length;
  submit(std::move(out), PendingOp{completion, Kind::put, "write"});
}

void TcpChannel::get(RemoteSegment& seg, std::uint64_t offset, void* dst, std::size_t length,
                     const CompletionPtr& completion) {
  submit(request(Kind::get, seg, offset, length, completion), PendingOp{completion, Kind::get, "read", dst, length});
}

void TcpChannel::fetch_add(RemoteSegment& seg, std::uint64_t offset, std::uint64_t value, std::uint64_t* old_value,
                           const CompletionPtr& completion) {
  atomic(AtomicOp::fetch_add, "fetch-add", seg, offset, value, 0, old_value, completion);
}

void TcpChannel::compare_swap(RemoteSegment& seg, std::uint64_t offset, std::uint64_t expected,
                              std::uint64_t desired, std::uint64_t* old_value, const CompletionPtr& completion) {
  atomic(AtomicOp::compare_swap, "compare-swap", seg, offset, desired, expected, old_value, completion);
}

void TcpChannel::atomic(AtomicOp op, const char* what, RemoteSegment& seg, std::uint64_t offset,
                        std::uint64_t operand, std::uint64_t compare, std::uint64_t* old_value,
                        const CompletionPtr& completion) {
  Outgoing out = request(Kind::atomic, seg, offset, 0, completion);
  out.header.atomic_op = static_cast<std::uint32_t>(op);
  out.header.operand = operand;
  out.header.compare = compare;
  submit(std::move(out), PendingOp{completion, Kind::atomic, what, old_value, sizeof *old_value});
}

void TcpChannel::call(std::span<const std::uint8_t> frame, std::span<const std::byte> payload, Bytes* reply,
                      const CompletionPtr& completion) {
  if (frame.size() > kMaxCallFrame || payload.size() > kMaxCallPayload) {
    completion->finish(Errc::invalid_argument, "server " + peer_ + ": call of " + std::to_string(frame.size()) +
                                                   " + " + std::to_string(payload.size()) +
                                                   " bytes is larger than the tcp transport carries");
    return;
  }
  Outgoing out;
  out.completion = completion;
  out.header.kind = static_cast<std::uint32_t>(Kind::call);
  out.header.frame_length = static_cast<std::uint32_t>(frame.size());
  out.header.length = payload.size();
  out.frame.assign(frame.begin(), frame.end());
  out.data = payload.data();
  out.data_length = payload.size();
  PendingOp op{completion, Kind::call, "call"};
  op.reply = reply;
  submit(std::move(out), std::move(op));
}

namespace {
std::array<iovec, 3> parts_of(const RequestHeader& header, const std::vector<std::uint8_t>& frame, const void* data,
                              std::size_t data_length) {
  return {iovec{const_cast<RequestHeader*>(&header), sizeof header},
          iovec{const_cast<std::uint8_t*>(frame.data()), frame.size()},
          iovec{const_cast<void*>(data), data_length}};
}
}  // namespace

void TcpChannel::submit(Outgoing out, PendingOp op) {
  const char* what = op.what;
  Stream& s = stream_for(op.kind);
  {
    std::lock_guard lock(mutex_);
    if (!health_.admit(out.completion, what)) return;
    out.header.token = pending_.add(std::move(op));
  }
  std::unique_lock lock(s.send_mutex);
  if (s.queue.empty()) {  // nothing before it on the stream: as much as the socket takes now
    const auto parts = parts_of(out.header, out.frame, out.data, out.data_length);
    const long n = send_from(s.fd.get(), parts, 0, MSG_DONTWAIT);
    if (n < 0) {
      const int error = errno;
      lock.unlock();
      fail(Errc::server_gone, "server " + peer_ + ": sending a " + what + ": " + why(error));
      return;
    }
    if (static_cast<std::size_t>(n) == out.total()) return;
    out.sent = static_cast<std::size_t>(n);
  }
  s.queue.push_back(std::move(out));
  s.send_cv.notify_all();
}

void TcpChannel::send_loop(Stream& s) {
  std::unique_lock lock(s.send_mutex);
  for (;;) {
    s.send_cv.wait(lock, [&] { return s.stopping || !s.queue.empty(); });
    if (s.stopping) return;
    s.sending = true;
    Outgoing& out = s.queue.front();  // stays put while others push_back (std::deque)
    lock.unlock();
    const auto parts = parts_of(out.header, out.frame, out.data, out.data_length);
    bool ok = true;
    while (ok && out.sent < out.total()) {
      const long n = send_from(s.fd.get(), parts, out.sent, 0);
      ok = n > 0;
      if (ok) out.sent += static_cast<std::size_t>(n);
    }
    const int error = errno;
    lock.lock();
    s.queue.pop_front();
    s.sending = false;
    s.send_cv.notify_all();
    if (!ok) {
      lock.unlock();
      fail(Errc::server_gone, "server " + peer_ + ": sending: " + why(error));
      lock.lock();
    }
  }
}

void TcpChannel::receive_loop(Stream& s) {
  ReplyHeader h;
  while (recv_all(s.fd.get(), &h, sizeof h))
    if (!receive_reply(s, h)) break;
  const int error = errno;
  fail(Errc::server_gone, "server " + peer_ + ": its tcp data connection closed (" + why(error) + ")");
}

bool TcpChannel::receive_reply(Stream& s, const ReplyHeader& h) {
  std::unique_lock lock(mutex_);
  auto op = pending_.take(h.token);
  if (!op) {  // its op was abandoned (or failed): drop the data
    lock.unlock();
    return h.length <= kMaxCallPayload && discard(s.fd.get(), h.length);
  }
  // Only failures are told, so the text is built only for them (hot path).
  const auto context = [&] { return "server " + peer_ + ": " + op->what; };
  const auto code = h.status >= 0 && h.status <= static_cast<int>(kLastErrc) ? static_cast<Errc>(h.status)
                                                                             : Errc::protocol;
  const std::uint64_t expected = code != Errc::ok       ? 0
                                 : op->kind == Kind::call ? std::min<std::uint64_t>(h.length, kMaxReplyFrame)
                                                          : op->length;
  if (h.length != expected) {
    lock.unlock();
    op->completion->finish(Errc::protocol, context() + ": reply carries " + std::to_string(h.length) +
                                               " bytes, expected " + std::to_string(expected));
    return false;  // the stream cannot be followed any more
  }
  bool ok = true;
  if (h.length == 0) {  // nothing goes into the caller's memory
    lock.unlock();
  } else {
    s.receiving = op->completion.get();  // drop() waits for it before the caller gets the memory back
    lock.unlock();
    if (op->kind == Kind::call) {
      op->reply->resize(static_cast<std::size_t>(h.length));
      ok = recv_all(s.fd.get(), op->reply->data(), op->reply->size());
    } else {
      ok = recv_all(s.fd.get(), op->dst, op->length);  // straight into the caller's memory
    }
    lock.lock();
    s.receiving = nullptr;
    received_.notify_all();
    lock.unlock();
  }
  if (!ok) {
    op->completion->finish(Errc::server_gone, context() + ": the connection closed during the reply");
    return false;
  }
  if (code != Errc::ok)
    op->completion->finish(code, context() + " refused: " + errc_name(code));
  else
    op->completion->finish();
  transport_.completed();
  return true;
}

void TcpChannel::fail(Errc code, const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    health_.fail(reason);
    pending_.fail_all(code, health_.reason());
  }
  shut_down();
  transport_.completed();
}

void TcpChannel::peer_lost(const std::string& reason) { fail(Errc::server_gone, reason); }

std::optional<std::string> TcpChannel::failure() const {
  std::lock_guard lock(mutex_);
  return health_.failure();
}

std::string TcpChannel::stall_report() const {
  std::string text = "tcp to " + host_port_ + ": ";
  {
    std::lock_guard lock(mutex_);
    text += std::to_string(pending_.size()) + " op(s) awaiting replies";
    if (health_.failed()) text += ", failed: " + health_.reason();
  }
  static constexpr std::array<const char*, 3> kNames{"writes", "reads", "atomics"};
  for (std::size_t i = 0; i < streams_.size(); ++i) {
    Stream& s = streams_[i];
    std::size_t queued = 0;
    {
      std::lock_guard lock(s.send_mutex);
      queued = s.queue.size();
    }
    text += std::string("; ") + kNames[i] + ": " + (s.fd.get() >= 0 ? socket_state(s.fd.get()) : std::string("closed")) +
            (queued > 0 ? ", " + std::to_string(queued) + " request(s) not yet with the kernel" : "");
  }
  return text;
}

// A timed-out op's memory is the caller's again: nothing may read or write
// it later. Queued requests that have not started go; one whose bytes are
// on the wire, or whose reply is being read, cannot be cut out of the
// stream: the channel closes.
void TcpChannel::drop(const Completion& completion) {
  bool broken = false;
  for (Stream& s : streams_) broken = drop_from(s, completion) || broken;  // every stream, whatever one found
  if (broken) fail(Errc::timeout, "server " + peer_ + ": an op timed out with its data on the wire; channel closed");
}

bool TcpChannel::drop_from(Stream& s, const Completion& completion) {
  bool broken = false;
  {
    std::unique_lock lock(s.send_mutex);
    const auto in_flight = [&] { return s.sending && s.queue.front().completion.get() == &completion; };
    if (in_flight()) {
      broken = true;
      shut_down();
      s.send_cv.wait(lock, [&] { return !in_flight(); });
    }
    for (auto it = s.queue.begin(); it != s.queue.end();) {
      const bool busy = s.sending && it == s.queue.begin();
      if (!busy && it->completion.get() == &completion) {
        broken = broken || it->sent != 0;
        it = s.queue.erase(it);
      } else {
        ++it;
      }
    }
  }
  std::unique_lock lock(mutex_);
  pending_.forget(completion);
  // Its reply is arriving: let it land (the bytes are on their way, so
  // briefly) rather than close the channel under every other op on it. A
  // client's timeout can meet the server's answer at the same moment (a
  // replicated op's order wait and the client's timeout are both 5 s).
  // Only a reply that stalls midway closes the channel.
  if (s.receiving == &completion &&
      !received_.wait_for(lock, kReplyLanding, [&] { return s.receiving != &completion; })) {
    broken = true;
    shut_down();
    received_.wait(lock, [&] { return s.receiving != &completion; });
  }
  return broken;
}

}  // namespace smb::transport::tcp
