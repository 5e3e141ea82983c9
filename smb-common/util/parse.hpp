#pragma once
// Parsing of user-supplied text (CLI flags, environment, config files).
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace smb::util {

struct HostPort {
  std::string host;
  std::uint16_t port = 0;
  std::string str() const { return host + ":" + std::to_string(port); }
};

// "host:port"; port may be 0 where allow_zero_port (the OS picks one). The
// host is a DNS name or an IP address: 1 to 253 characters, no spaces or
// control characters.
HostPort parse_host_port(std::string_view text, bool allow_zero_port = false);
// A peer's or user's string as error texts show it: in quotes, at most 64
// bytes (then "...(N bytes)"), bytes outside printable ASCII as \xNN, so
// that any text built from it stays short and valid UTF-8.
std::string quoted(std::string_view text);
// Human-readable size with a binary unit: 1536 -> "1.5 KiB".
std::string format_bytes(std::uint64_t bytes);

// How long a connection's set-up stages may take together (a TCP connect,
// rdma_cm's address and route resolution and connect): SMB_CONNECT_TIMEOUT
// seconds ("5", "0.5"), default 5, so that an unreachable peer fails in
// seconds, naming the stage, not after the longer wait for replies.
// Throws Errc::invalid_argument naming the variable for anything else.
std::chrono::milliseconds connect_timeout();

}  // namespace smb::util
