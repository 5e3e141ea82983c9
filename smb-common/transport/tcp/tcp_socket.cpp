#include "transport/tcp/tcp_socket.hpp"

#include <smb/error.hpp>

#include "util/parse.hpp"

#include <fcntl.h>
#include <linux/sockios.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

namespace smb::transport::tcp {

bool recv_all(int fd, void* dst, std::size_t length) {
  auto* p = static_cast<std::byte*>(dst);
  while (length > 0) {
    const ssize_t n = ::recv(fd, p, length, MSG_WAITALL);
    if (n > 0) {
      p += n;
      length -= static_cast<std::size_t>(n);
    } else if (n == 0) {
      errno = 0;
      return false;
    } else if (errno != EINTR) {
      return false;
    }
  }
  return true;
}

bool discard(int fd, std::uint64_t length) {
  std::vector<std::byte> sink(static_cast<std::size_t>(std::min<std::uint64_t>(length, 256 * 1024)));
  while (length > 0) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(length, sink.size()));
    if (!recv_all(fd, sink.data(), n)) return false;
    length -= n;
  }
  return true;
}

long send_from(int fd, std::span<const iovec> parts, std::size_t offset, int flags) {
  // The parts left from `offset` (at most a header, a frame and a payload).
  iovec left[4];
  std::size_t count = 0;
  std::size_t total = 0;
  for (const auto& part : parts) {
    if (offset >= part.iov_len) {
      offset -= part.iov_len;
      continue;
    }
    if (count == std::size(left)) break;
    left[count++] = iovec{static_cast<std::byte*>(part.iov_base) + offset, part.iov_len - offset};
    total += part.iov_len - offset;
    offset = 0;
  }
  std::size_t sent = 0;
  std::size_t first = 0;
  while (sent < total) {
    msghdr msg{};
    msg.msg_iov = left + first;
    msg.msg_iovlen = count - first;
    const ssize_t n = ::sendmsg(fd, &msg, flags | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return static_cast<long>(sent);
      return -1;
    }
    sent += static_cast<std::size_t>(n);
    for (auto k = static_cast<std::size_t>(n); k > 0 && first < count;) {
      const std::size_t step = std::min(k, left[first].iov_len);
      left[first].iov_base = static_cast<std::byte*>(left[first].iov_base) + step;
      left[first].iov_len -= step;
      k -= step;
      if (left[first].iov_len == 0) ++first;
    }
  }
  return static_cast<long>(sent);
}

bool send_all(int fd, std::span<const iovec> parts) {
  std::size_t total = 0;
  for (const auto& part : parts) total += part.iov_len;
  std::size_t sent = 0;
  while (sent < total) {
    const long n = send_from(fd, parts, sent, 0);
    if (n < 0) return false;
    if (n == 0) {  // a blocking send that made no progress: its send timeout passed
      errno = ETIMEDOUT;
      return false;
    }
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

namespace {
[[noreturn]] void fail(const std::string& what) {
  throw Error(Errc::transport, "tcp transport: " + what + ": " + std::strerror(errno));
}
}  // namespace

util::UniqueFd listen_any(std::uint16_t port) {
  util::UniqueFd fd(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int on = 1;
  const int off = 0;
  if (fd) {
    ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in6 any{};
    any.sin6_family = AF_INET6;
    any.sin6_addr = in6addr_any;
    any.sin6_port = htons(port);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&any), sizeof any) != 0) fd.reset();
  }
  if (!fd) {  // no IPv6 on this host
    fd = util::UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) fail("socket");
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_addr.s_addr = htonl(INADDR_ANY);
    any.sin_port = htons(port);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&any), sizeof any) != 0)
      fail("binding data port " + std::to_string(port));
  }
  if (::listen(fd.get(), 128) != 0) fail("listen");
  return fd;
}

std::uint16_t local_port(int fd) {
  sockaddr_storage addr{};
  socklen_t length = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) fail("getsockname");
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

util::UniqueFd connect_to(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout,
                          const std::string& peer) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0)
    throw Error(Errc::unreachable, "server " + peer + ": cannot resolve '" + host + "': " + ::gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  std::string why = "no address";
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    util::UniqueFd fd(::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) continue;
    int rc = ::connect(fd.get(), a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
      if (rc == 0) {
        errno = ETIMEDOUT;
        rc = -1;
      } else if (rc > 0) {
        int error = 0;
        socklen_t length = sizeof error;
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
        errno = error;
        rc = error == 0 ? 0 : -1;
      }
    }
    if (rc == 0) {
      ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
      return fd;
    }
    why = std::strerror(errno);
  }
  throw Error(Errc::unreachable, "server " + peer + ": cannot connect its tcp data port " + host + ":" + service +
                                     ": " + why + " (is a firewall between this host and the server?)");
}

std::string socket_state(int fd) {
  tcp_info info{};
  socklen_t length = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0)
    return std::string("TCP_INFO unavailable: ") + std::strerror(errno);
  // The kernel's TCP_* states (include/net/tcp_states.h), from 1.
  static constexpr std::array<std::string_view, 12> kStates{
      "?", "ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT1", "FIN_WAIT2", "TIME_WAIT",
      "CLOSE", "CLOSE_WAIT (the server closed it)", "LAST_ACK", "LISTEN", "CLOSING"};
  std::string text(info.tcpi_state < kStates.size() ? kStates[info.tcpi_state] : "state " + std::to_string(info.tcpi_state));
  int unsent = 0;
  int queued = 0;  // unsent and unacknowledged
  if (::ioctl(fd, SIOCOUTQNSD, &unsent) == 0 && ::ioctl(fd, SIOCOUTQ, &queued) == 0)
    text += ", " + util::format_bytes(static_cast<std::uint64_t>(unsent)) + " unsent, " +
            util::format_bytes(static_cast<std::uint64_t>(std::max(0, queued - unsent))) + " unacknowledged";
  if (info.tcpi_probes > 0)  // the server's receive window is closed: it is not reading
    text += ", " + std::to_string(info.tcpi_probes) + " zero-window probes unanswered (the server reads nothing)";
  if (info.tcpi_total_retrans > 0) text += ", " + std::to_string(info.tcpi_total_retrans) + " segments retransmitted";
  char rtt[32];
  std::snprintf(rtt, sizeof rtt, ", rtt %.1f ms", info.tcpi_rtt / 1000.0);
  return text + rtt;
}

void tune(int fd, std::chrono::milliseconds send_timeout, std::chrono::milliseconds receive_timeout) {
  const int on = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  const auto as_timeval = [](std::chrono::milliseconds t) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(t.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
    return tv;
  };
  const timeval send = as_timeval(send_timeout);
  const timeval receive = as_timeval(receive_timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send, sizeof send);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &receive, sizeof receive);
}

}  // namespace smb::transport::tcp
