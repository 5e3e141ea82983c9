#include "control_session.hpp"

#include "control_server.hpp"
#include "protocol/auth.hpp"
#include "protocol/credential.hpp"
#include "util/parse.hpp"

#include <spdlog/spdlog.h>

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

namespace smb::server {

namespace asio = boost::asio;
using asio::ip::tcp;
using protocol::MessageType;

namespace {
// Bodies are read in pieces of at most this, so that memory follows the
// bytes that arrived, not the length a header announced.
constexpr std::size_t kReadChunk = 64 * 1024;
// A hello carries names and a transport address: a few KiB at most.
constexpr std::uint32_t kMaxHelloBody = 64 * 1024;
constexpr auto kHello = static_cast<std::uint16_t>(MessageType::hello);
constexpr auto kAuth = static_cast<std::uint16_t>(MessageType::auth);

std::string seconds(std::chrono::milliseconds d) {
  return std::to_string(d.count() / 1000) + "." + std::to_string(d.count() % 1000 / 100) + " s";
}
}  // namespace

ControlSession::ControlSession(ControlServer& server, tcp::socket socket, SessionId id)
    : server_(server), socket_(std::move(socket)), deadline_(socket_.get_executor()), expiry_(socket_.get_executor()),
      id_(id) {
  boost::system::error_code ec;
  auto remote = socket_.remote_endpoint(ec);
  peer_ = ec ? std::string("?") : remote.address().to_string() + ":" + std::to_string(remote.port());
}

void ControlSession::start() {
  arm(server_.limits().hello_timeout, "no hello within " + seconds(server_.limits().hello_timeout));
  read_header();
}

void ControlSession::close() {
  boost::system::error_code ignored;
  deadline_.cancel();
  expiry_.cancel();
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

void ControlSession::arm(std::chrono::milliseconds after, std::string why) {
  deadline_reason_ = std::move(why);
  deadline_.expires_after(after);
  deadline_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (!ec && self) self->end(self->deadline_reason_);
  });
}

void ControlSession::disarm() { deadline_.cancel(); }

void ControlSession::read_header() {
  socket_.async_read_some(
      asio::buffer(header_.data() + header_have_, header_.size() - header_have_),
      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
        if (ec) return self->end(ec.message());
        // The frame's first byte starts its deadline (before hello, the hello deadline runs).
        if (self->header_have_ == 0 && self->greeted_)
          self->arm(self->server_.limits().frame_timeout,
                    "a frame was not completed within " + seconds(self->server_.limits().frame_timeout));
        self->header_have_ += n;
        if (self->header_have_ < self->header_.size()) return self->read_header();
        self->header_have_ = 0;
        try {
          self->request_ = protocol::decode_frame_header(self->header_);
        } catch (const Error& e) {
          return self->end(e.what());  // not our protocol: drop the connection
        }
        // Another wire version: a first frame is read whole and answered
        // (frame_complete) with the mismatch, in this server's version; a
        // later one cannot happen from a client that said hello.
        if (self->request_.version != protocol::kVersion && self->greeted_)
          return self->end("a frame in wire version " + std::to_string(self->request_.version) + " after hello");
        const bool challenged = !self->challenge_.empty();
        const bool foreign = self->request_.version != protocol::kVersion;  // answered whatever its type
        if (challenged && !foreign && self->request_.type != kAuth)
          return self->send_and_close(protocol::error_reply(
              Errc::permission_denied, std::string(protocol::message_name(self->request_.type)) +
                                           " before auth: this server wants the shared secret first"));
        if (!self->greeted_ && !challenged && !foreign && self->request_.type != kHello)
          return self->send_and_close(protocol::error_reply(
              Errc::protocol, std::string(protocol::message_name(self->request_.type)) +
                                  " before hello: a client must say hello first"));
        if (!self->greeted_ && self->request_.body_length > kMaxHelloBody)
          return self->end("hello of " + std::to_string(self->request_.body_length) + " bytes (at most " +
                           std::to_string(kMaxHelloBody) + ")");
        self->body_.clear();
        if (self->request_.body_length == 0) return self->frame_complete();
        self->read_body();
      });
}

void ControlSession::read_body() {
  const std::size_t have = body_.size();
  // At most what has arrived so far (at least 4 KiB), so the buffer grows
  // with the bytes, whatever the header announced.
  const std::size_t want = std::min<std::size_t>(request_.body_length - have, std::clamp<std::size_t>(have, 4096, kReadChunk));
  body_.resize(have + want);
  socket_.async_read_some(asio::buffer(body_.data() + have, want),
                          [self = shared_from_this(), have](const boost::system::error_code& ec, std::size_t n) {
                            if (ec) return self->end(ec.message());
                            self->body_.resize(have + n);
                            if (self->body_.size() < self->request_.body_length) return self->read_body();
                            self->frame_complete();
                          });
}

void ControlSession::frame_complete() {
  if (greeted_) disarm();
  if (request_.version != protocol::kVersion)
    return send_and_close(protocol::error_reply(Errc::protocol,
                                                protocol::version_mismatch(request_.version, protocol::kVersion)));
  if (!greeted_ && request_.type == kHello && !server_.limits().auth_secret.empty()) return challenge();
  if (!challenge_.empty()) return check_proof();  // read_header let nothing but auth through
  if (!greeted_ && request_.type == kHello) return greet(body_);
  deferred_ = true;
  server_.serve(id_, scope_, request_.type, body_, [self = shared_from_this()](protocol::Body reply) {
    if (!self->ended_) self->send(reply);
  });
  body_ = {};  // serve() decoded it; a large body's memory goes back now
  if (deferred_) watch_while_deferred();
}

void ControlSession::greet(std::span<const std::uint8_t> hello) {
  server_.serve(id_, scope_, kHello, hello, [self = shared_from_this()](protocol::Body reply) {
    if (self->ended_) return;
    if (protocol::is_ok(reply)) {
      self->greeted_ = true;
      self->disarm();
      // What its data channels present to the transport (channel_admission.hpp).
      reply["ticket"] = protocol::binary(self->server_.tickets().issue(self->id_, self->scope_));
    }
    self->send(reply);
  });
}

// The hello waits until the client proves it holds the secret; until then
// it learns nothing but the challenge (no transport address, no session).
void ControlSession::challenge() {
  challenge_ = protocol::make_challenge();
  hello_body_ = std::move(body_);
  body_ = {};
  send(protocol::ok_reply({{"auth", protocol::kAuthScheme}, {"challenge", protocol::binary(challenge_)}}));
}

// The proof of the shared secret, or of a credential for a name prefix
// (protocol/credential.hpp): the key is derived again from this server's
// secret, so a changed prefix or expiry fails like a wrong secret.
void ControlSession::check_proof() {
  protocol::Bytes proof;
  std::string prefix;
  std::uint64_t expires = 0;
  try {
    const auto body = protocol::decode_body(body_);
    proof = protocol::get_binary(body, "proof", "auth");
    if (body.contains("prefix")) {
      prefix = protocol::get_string(body, "prefix", "auth");
      protocol::validate_prefix(prefix);
      expires = protocol::get_u64(body, "expires", "auth");
    }
  } catch (const Error&) {
    proof.clear();  // malformed: the same answer as a wrong proof
  }
  const auto& secret = server_.limits().auth_secret;
  const bool matches = protocol::proof_matches(
      prefix.empty() ? secret : protocol::credential_key(secret, prefix, expires), challenge_, proof);
  challenge_.clear();
  if (!matches) {
    spdlog::warn("client {} (session {}) failed authentication: {}", peer_, id_,
                 prefix.empty() ? "its secret is not this server's"
                                : "its credential for " + util::quoted(prefix) + " was not made with this server's secret");
    return send_and_close(protocol::error_reply(
        Errc::permission_denied,
        prefix.empty() ? "authentication failed: the client's shared secret (SMB_AUTH_TOKEN_FILE) is not "
                         "this server's (--auth-token-file)"
                       : "authentication failed: the client's credential (SMB_AUTH_TOKEN_FILE) for names starting " +
                             util::quoted(prefix) + " was not made with this server's secret (--auth-token-file)"));
  }
  if (!prefix.empty() && !start_scope(prefix, expires)) return;
  auto hello = std::move(hello_body_);
  hello_body_ = {};
  body_ = {};
  greet(hello);
}

// A credential's session: scoped to its prefix until it expires, when the
// session (and with it every data channel it admitted) is closed.
bool ControlSession::start_scope(const std::string& prefix, std::uint64_t expires) {
  const auto now = std::chrono::system_clock::now();
  // Past ten years from now is as good as never (and stays far from the clocks' limits).
  const auto now_s = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  if (expires <= static_cast<std::uint64_t>(now_s)) {
    spdlog::warn("client {} (session {}) presented a credential for {} that expired", peer_, id_,
                 util::quoted(prefix));
    send_and_close(protocol::error_reply(
        Errc::permission_denied, "authentication failed: the client's credential (SMB_AUTH_TOKEN_FILE) for names "
                                 "starting " + util::quoted(prefix) + " has expired (unix time " +
                                     std::to_string(expires) + "): make a new one with smbctl credential create"));
    return false;
  }
  scope_ = prefix;
  constexpr std::uint64_t kTenYears = 10ull * 366 * 24 * 3600;
  expiry_.expires_after(std::chrono::seconds(std::min(expires - static_cast<std::uint64_t>(now_s), kTenYears)));
  expiry_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (!ec && self) self->end("its credential for " + util::quoted(self->scope_) + " expired");
  });
  return true;
}

// No read is outstanding while a reply is deferred, so a client that dies
// then would go unnoticed (and keep its barrier waiting). Watch the socket:
// readable with nothing to read means the client has gone.
void ControlSession::watch_while_deferred() {
  socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || self->ended_ || !self->deferred_) return;
    char byte = 0;
    const auto n = ::recv(self->socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
      self->end("disconnected while waiting for a deferred reply");
    // Bytes available: the client sent its next request early; read_header takes it after the reply.
  });
}

void ControlSession::send(const protocol::Body& reply) {
  deferred_ = false;
  out_ = protocol::encode_reply(request_.type, request_.request_id, reply);
  asio::async_write(socket_, asio::buffer(out_), [self = shared_from_this()](auto ec, std::size_t) {
    if (ec) return self->end(ec.message());
    self->read_header();
  });
}

void ControlSession::send_and_close(const protocol::Body& reply) {
  out_ = protocol::encode_reply(request_.type, request_.request_id, reply);
  std::string why = reply.contains("error") && reply["error"].is_string() ? reply["error"].get<std::string>()
                                                                               : "refused";
  asio::async_write(socket_, asio::buffer(out_), [self = shared_from_this(), why](auto, std::size_t) {
    self->end(why);
  });
}

void ControlSession::end(const std::string& why) {
  if (ended_) return;
  ended_ = true;
  spdlog::info("client {} (session {}) left: {}", peer_, id_, why);
  close();
  server_.session_ended(shared_from_this());
}

}  // namespace smb::server
