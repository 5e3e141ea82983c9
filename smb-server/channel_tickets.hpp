#pragma once
// The tickets that bind clients' data channels to their authenticated
// control sessions (transport/channel_admission.hpp): every greeted session
// (with --auth-token-file: one that proved the secret) gets one in its hello
// reply, its channels present it to the transport, and it is revoked when
// the session closes. Thread-safe.
#include "registry.hpp"
#include "transport/channel_admission.hpp"

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <vector>

namespace smb::server {

class ChannelTickets {
 public:
  // A fresh random ticket for `session` (one per session).
  std::vector<std::uint8_t> issue(SessionId session);
  void revoke(SessionId session);
  bool admits(std::span<const std::uint8_t> ticket) const;
  // What the transport checks channels against.
  transport::ChannelAdmission admission() const;

 private:
  // Digests (protocol::digest) of the tickets of open sessions.
  mutable std::mutex mutex_;
  std::map<SessionId, std::vector<std::uint8_t>> by_session_;
  std::set<std::vector<std::uint8_t>> live_;
  std::atomic<std::uint64_t> revocations_{0};
};

}  // namespace smb::server
