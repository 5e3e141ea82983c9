#pragma once
// What one smbd allows its clients: connections, how long a connection may
// take to say hello or to finish a frame, and what one client session may
// hold. Each has a flag (main.cpp) and a default that a training job with
// thousands of buffers never reaches; an error that hits one names its flag.
#include <smb/error.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace smb::server {

struct ConnectionLimits {
  // 0: derived from the open-file limit at start (main.cpp).
  std::uint32_t max_connections = 0;
  // A connection that has not said hello by then is closed.
  std::chrono::milliseconds hello_timeout{std::chrono::seconds(10)};
  // A frame whose first byte has arrived must be complete by then.
  std::chrono::milliseconds frame_timeout{std::chrono::seconds(30)};
  // --auth-token-file's secret; empty: sessions need none (protocol/auth.hpp).
  std::string auth_secret;
};

// Per client session; what outlives the session (committed layouts, the
// segments of buffers nobody destroyed) stops counting when it closes.
struct SessionQuotas {
  std::uint64_t segments = 1'000'000;          // --max-segments-per-client: handles held (created + opened)
  std::uint64_t layouts = 1'000'000;           // --max-layouts-per-client: layout records created
  std::uint64_t layout_bytes = 256ull << 20;   // --max-layout-bytes-per-client: their encoded bytes
  std::uint64_t locks = 100'000;               // --max-locks-per-client: held and waiting
  // --lock-grace: after a start, how long locks of names kept on two servers
  // are granted only to holders restoring them (docs/reliability.md,
  // "Locks and barriers with two keepers").
  std::chrono::milliseconds lock_grace{std::chrono::seconds(2)};
};

// The no_space error of a quota: what this client holds, and the flag that sets the limit.
[[noreturn]] inline void over_quota(const char* what, std::uint64_t held, const char* flag) {
  throw Error(Errc::no_space, std::string("this client already holds ") + std::to_string(held) + " " + what +
                                  " here, the per-client limit (smbd " + flag + ")");
}

}  // namespace smb::server
