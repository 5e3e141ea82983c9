#include "raw_connection.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace smb::test {
namespace {

using Clock = std::chrono::steady_clock;

void put_le(RawBytes& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::uint8_t>(value >> (8 * i)));
}

std::uint64_t get_le(const std::uint8_t* in, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(in[i]) << (8 * i);
  return v;
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(left);
}

}  // namespace

RawBytes encode_raw_header(const RawHeader& h) {
  RawBytes out;
  put_le(out, h.magic, 4);
  put_le(out, h.version, 2);
  put_le(out, h.type, 2);
  put_le(out, h.request_id, 4);
  put_le(out, h.body_length, 4);
  return out;
}

RawBytes raw_frame(std::uint16_t type, std::uint32_t request_id, const RawBytes& body) {
  RawHeader h;
  h.type = type;
  h.request_id = request_id;
  h.body_length = static_cast<std::uint32_t>(body.size());
  RawBytes out = encode_raw_header(h);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

RawBytes msgpack_frame(std::uint16_t type, std::uint32_t request_id, const nlohmann::json& body) {
  return raw_frame(type, request_id, nlohmann::json::to_msgpack(body));
}

RawConnection::RawConnection(const std::string& host_port) {
  const auto colon = host_port.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (colon == std::string::npos || ::inet_pton(AF_INET, host_port.substr(0, colon).c_str(), &addr.sin_addr) != 1)
    throw std::runtime_error("RawConnection: '" + host_port + "' is not an IPv4 HOST:PORT");
  addr.sin_port = htons(static_cast<std::uint16_t>(std::stoi(host_port.substr(colon + 1))));
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw std::runtime_error("socket: " + std::string(std::strerror(errno)));
  if (::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd_);
    throw std::runtime_error("connect to " + host_port + ": " + why);
  }
}

RawConnection::~RawConnection() {
  if (fd_ >= 0) ::close(fd_);
}

bool RawConnection::send(const RawBytes& bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    // MSG_NOSIGNAL: a daemon that hung up must fail the send, not kill the test.
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

bool RawConnection::read_exact(std::uint8_t* out, std::size_t length, Clock::time_point deadline) {
  std::size_t got = 0;
  while (got < length) {
    pollfd p{fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, remaining_ms(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    const ssize_t n = ::recv(fd_, out + got, length - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<std::size_t>(n);
  }
  return true;
}

std::optional<RawReply> RawConnection::receive(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::uint8_t head[16];
  if (!read_exact(head, sizeof head, deadline)) return std::nullopt;
  RawReply reply;
  reply.header.magic = static_cast<std::uint32_t>(get_le(head, 4));
  reply.header.version = static_cast<std::uint16_t>(get_le(head + 4, 2));
  reply.header.type = static_cast<std::uint16_t>(get_le(head + 6, 2));
  reply.header.request_id = static_cast<std::uint32_t>(get_le(head + 8, 4));
  reply.header.body_length = static_cast<std::uint32_t>(get_le(head + 12, 4));
  if (reply.header.body_length > (1u << 20)) return std::nullopt;
  RawBytes body(reply.header.body_length);
  if (!read_exact(body.data(), body.size(), deadline)) return std::nullopt;
  reply.body = nlohmann::json::from_msgpack(body, true, false);
  return reply;
}

bool RawConnection::closed_by_peer(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    pollfd p{fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, remaining_ms(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;  // still open at the deadline
    std::uint8_t sink[4096];
    const ssize_t n = ::recv(fd_, sink, sizeof sink, 0);
    if (n == 0) return true;                        // orderly close
    if (n < 0 && errno != EINTR) return true;       // reset
  }
}

bool RawConnection::hello(const std::string& transport) {
  constexpr std::uint16_t kHello = 1;
  if (!send(msgpack_frame(kHello, 0, {{"client", "raw-test"}, {"transport", transport}}))) return false;
  auto reply = receive();
  return reply && reply->body.is_object() && reply->body.value("ok", false);
}

}  // namespace smb::test
