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
#include <optional>
#include <string>
#include <vector>

namespace smb::server {

class ChannelTickets {
 public:
  // A fresh random ticket for `session` (one per session), whose channels
  // reach the names starting with `scope` only (empty: every name).
  std::vector<std::uint8_t> issue(SessionId session, const std::string& scope);
  void revoke(SessionId session);
  // The scope of the open session that holds `ticket`; nullopt: none does.
  std::optional<std::string> admits(std::span<const std::uint8_t> ticket) const;
  // What the transport checks channels against.
  transport::ChannelAdmission admission() const;

 private:
  // Digests (protocol::digest) of the tickets of open sessions.
  mutable std::mutex mutex_;
  std::map<SessionId, std::vector<std::uint8_t>> by_session_;
  std::map<std::vector<std::uint8_t>, std::string> live_;  // digest -> scope
  std::atomic<std::uint64_t> revocations_{0};
};

}  // namespace smb::server
