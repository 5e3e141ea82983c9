#pragma once
// The timeout a waiting request states (version waits, locks, barriers).
#include "protocol/messages.hpp"

#include <smb/error.hpp>

#include <chrono>
#include <string>

namespace smb::server {

inline constexpr std::uint64_t kMaxWaitMs = 24ull * 3600 * 1000;

// `ms`, 1 ms to 24 h; anything else is invalid_argument.
inline std::chrono::milliseconds wait_timeout(std::uint64_t ms, const char* field, const char* what) {
  if (ms == 0 || ms > kMaxWaitMs)
    throw Error(Errc::invalid_argument, std::string(what) + ": " + field + " must be 1 ms to 24 h");
  return std::chrono::milliseconds(ms);
}

// `field` of a request, in milliseconds, checked the same way.
inline std::chrono::milliseconds wait_timeout(const protocol::Body& request, const char* field, const char* what) {
  return wait_timeout(protocol::get_u64(request, field, what), field, what);
}

}  // namespace smb::server
