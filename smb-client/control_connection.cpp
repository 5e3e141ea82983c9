#include "control_connection.hpp"

#include "protocol/auth.hpp"

#include "util/parse.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <ctime>

namespace smb::client {

namespace asio = boost::asio;
using asio::ip::tcp;

template <class Start>
void ControlConnection::run_bounded(const std::string& what, std::chrono::milliseconds limit, Start start) {
  boost::system::error_code result = asio::error::would_block;
  io_.restart();
  start([&result](const boost::system::error_code& ec, auto&&...) { result = ec; });
  io_.run_for(limit);
  if (result == asio::error::would_block) {
    broken_ = true;
    boost::system::error_code ignored;
    socket_.close(ignored);
    io_.restart();
    io_.run();  // let the cancelled handler run before `result` goes out of scope
    throw Error(Errc::timeout, "server " + peer_ + ": " + what + ": no answer within " +
                                   std::to_string(limit.count()) + " ms");
  }
  if (result) {
    broken_ = true;
    const bool refused = result == asio::error::connection_refused || result == asio::error::host_unreachable;
    throw Error(refused ? Errc::unreachable : Errc::server_gone,
                "server " + peer_ + ": " + what + ": " + result.message() +
                    (refused ? " (is smbd running there? check SMB_SERVERS / --servers)" : ""));
  }
}

ControlConnection::ControlConnection(std::string peer, std::chrono::milliseconds timeout,
                                     const protocol::Body& hello, const protocol::ClientAuth& auth)
    : peer_(std::move(peer)), timeout_(timeout), socket_(io_) {
  const auto hp = util::parse_host_port(peer_);
  tcp::resolver resolver(io_);
  boost::system::error_code ec;
  auto endpoints = resolver.resolve(hp.host, std::to_string(hp.port), ec);
  if (ec) throw Error(Errc::unreachable, "server " + peer_ + ": cannot resolve host: " + ec.message());
  // The TCP connect alone has SMB_CONNECT_TIMEOUT (5 s): a peer that drops
  // packets shows as this stage, in seconds; the replies keep the longer wait.
  run_bounded("connect", std::min(timeout_, util::connect_timeout()),
              [&](auto handler) { asio::async_connect(socket_, endpoints, handler); });
  socket_.set_option(tcp::no_delay(true));
  hello_reply_ = call(protocol::MessageType::hello, hello);
  if (hello_reply_.contains("challenge")) {
    if (auth.empty()) {
      broken_ = true;
      throw Error(Errc::permission_denied,
                  "server " + peer_ + " wants a shared secret (it runs with --auth-token-file): give this client "
                  "the same one with SMB_AUTH_TOKEN_FILE=FILE");
    }
    const auto challenge = protocol::get_binary(hello_reply_, "challenge", "hello");
    hello_reply_ = call(protocol::MessageType::auth, auth.answer(challenge));
  }
  session_ = protocol::get_u64(hello_reply_, "session", "hello");
}

protocol::Body ControlConnection::call(protocol::MessageType type, const protocol::Body& request) {
  return call(type, request, std::chrono::milliseconds(0));
}

protocol::Body ControlConnection::call(protocol::MessageType type, const protocol::Body& request,
                                       std::chrono::milliseconds wait) {
  std::lock_guard lock(mutex_);
  const auto raw_type = static_cast<std::uint16_t>(type);
  const std::string what = protocol::message_name(raw_type);
  if (broken_) throw Error(Errc::server_gone, "server " + peer_ + ": " + what + ": connection lost earlier");
  const std::uint32_t id = next_request_++;
  const auto frame = protocol::encode_frame(raw_type, id, request);
  run_bounded(what, timeout_, [&](auto handler) { asio::async_write(socket_, asio::buffer(frame), handler); });

  std::array<std::uint8_t, protocol::kHeaderSize> head{};
  run_bounded(what, timeout_ + wait, [&](auto handler) { asio::async_read(socket_, asio::buffer(head), handler); });
  protocol::Header header;
  try {
    header = protocol::decode_frame_header(head);
  } catch (const Error& e) {
    broken_ = true;
    throw Error(Errc::protocol, "server " + peer_ + ": " + what + ": " + e.what());
  }
  std::vector<std::uint8_t> body(header.body_length);
  run_bounded(what, timeout_, [&](auto handler) { asio::async_read(socket_, asio::buffer(body), handler); });
  if (header.version != protocol::kVersion) {
    // A server of another release: its reply (an error naming both
    // versions, protocol/messages.hpp) ends the connection.
    broken_ = true;
    std::string why = protocol::version_mismatch(protocol::kVersion, header.version);
    try {
      const auto reply = protocol::decode_body(body);
      if (reply.contains("error") && reply["error"].is_string()) why = reply["error"].get<std::string>();
    } catch (const Error&) {
    }
    throw Error(Errc::protocol, "server " + peer_ + ": " + what + ": " + why);
  }
  if (header.type != (raw_type | protocol::kReplyBit) || header.request_id != id) {
    broken_ = true;
    throw Error(Errc::protocol, "server " + peer_ + ": " + what + ": reply does not match the request");
  }
  auto reply = protocol::decode_body(body);
  // The server's own words say what went wrong; the request's internal
  // name (reserve_name, hold_layout) would only puzzle a user.
  protocol::throw_if_error(reply, "server " + peer_);
  return reply;
}

bool ControlConnection::peer_closed() {
  // Asked before every data op: the coarse clock (a few ns, a few ms
  // resolution) is enough for a probe at most every millisecond or so.
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  const std::int64_t now = std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
  std::int64_t last = last_probe_ns_.load(std::memory_order_relaxed);
  if (now - last < 1'000'000 || !last_probe_ns_.compare_exchange_strong(last, now)) return broken_;
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock) return broken_;
  if (broken_) return true;
  // The server sends nothing unasked, so readable means closed (or reset).
  char byte = 0;
  const ssize_t n = ::recv(socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) broken_ = true;
  return broken_;
}

}  // namespace smb::client
