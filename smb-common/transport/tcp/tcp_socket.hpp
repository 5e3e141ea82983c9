#pragma once
// Blocking socket I/O for the tcp transport: whole messages in and out,
// with EINTR and short transfers handled once, here. A payload is read
// with one recv(MSG_WAITALL) straight into its destination (the segment, or
// the caller's memory), so the kernel's copy is the only copy and a
// thread wakes once per message, not once per segment of it.
#include "util/fd.hpp"

#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace smb::transport::tcp {

// Reads exactly `length` bytes; false on EOF or error (errno says which; 0 for EOF).
bool recv_all(int fd, void* dst, std::size_t length);
// Reads and drops `length` bytes.
bool discard(int fd, std::uint64_t length);
// Sends the concatenation of `parts` from byte `offset` on. Returns the
// bytes sent (all of them unless `flags` has MSG_DONTWAIT and the socket's
// buffer filled), or -1 on error (errno).
long send_from(int fd, std::span<const iovec> parts, std::size_t offset, int flags);
// The whole of `parts`; false on error.
bool send_all(int fd, std::span<const iovec> parts);

// A socket listening on every address (IPv6 and IPv4) at `port`, 0 for any free one.
util::UniqueFd listen_any(std::uint16_t port);
std::uint16_t local_port(int fd);
// A connected socket to host:port, or Error(unreachable) saying why, within `timeout`.
util::UniqueFd connect_to(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout,
                          const std::string& peer);
// The kernel's view of a connected socket, for a stalled op's report:
// "ESTABLISHED, 2.0 MiB unsent, 12 segments unacknowledged, 3 retransmitted, rtt 0.2 ms".
std::string socket_state(int fd);
// Low latency for small messages (no Nagle), and how long a blocked send or
// receive may make no progress before it fails (0: for ever).
void tune(int fd, std::chrono::milliseconds send_timeout, std::chrono::milliseconds receive_timeout);

}  // namespace smb::transport::tcp
