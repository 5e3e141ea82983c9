#pragma once
// Which clients' channels a server serves (smbd: only those of open control
// sessions, docs/reliability.md "Authentication"). A client's channel presents,
// as it connects, the ticket its control session (proven, with a secret) got in the
// hello reply; a transport serves nothing on a channel whose ticket it was
// not given by an open session: every transport keeps the same small state
// per channel (AdmittedTicket).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <span>
#include <vector>

namespace smb::transport {

// A ticket is this long (random bytes, protocol::make_challenge).
inline constexpr std::size_t kTicketLength = 32;

// `admits` says whether a ticket belongs to a session still open, and if so
// gives that session's scope (the prefix of the names it may use: a
// credential's, protocol/credential.hpp; empty: every name), and is
// thread-safe; each closed session advances `revocations`, so that a
// transport checks the channels it admitted again. Without `admits` every
// channel is served (a server embedded in a test; smbd always sets it).
struct ChannelAdmission {
  std::function<std::optional<std::string>(std::span<const std::uint8_t> ticket)> admits;
  const std::atomic<std::uint64_t>* revocations = nullptr;
  bool required() const { return static_cast<bool>(admits); }
};

// Whether a session closed since `seen` (which it then advances): a
// transport's cue to drop the channels it admitted for that session.
inline bool revoked_since(const ChannelAdmission& admission, std::uint64_t& seen) {
  if (admission.revocations == nullptr) return false;
  const std::uint64_t now = admission.revocations->load(std::memory_order_acquire);
  if (now == seen) return false;
  seen = now;
  return true;
}

// The ticket a channel presented, checked again only after a session closed,
// and its session's scope (fixed for the ticket's life: taken once).
class AdmittedTicket {
 public:
  AdmittedTicket() = default;
  explicit AdmittedTicket(std::span<const std::uint8_t> ticket) : ticket_(ticket.begin(), ticket.end()) {}
  // Whether `admission` admits this channel now.
  bool admitted(const ChannelAdmission& admission) {
    if (!admission.required()) return true;
    const std::uint64_t now = admission.revocations != nullptr ? admission.revocations->load(std::memory_order_acquire) : 0;
    if (checked_ && now == checked_at_) return true;
    auto scope = admission.admits(ticket_);
    checked_ = scope.has_value();
    checked_at_ = now;
    if (checked_ && !scoped_) {
      scope_ = std::move(*scope);
      scoped_ = true;
    }
    return checked_;
  }
  // The names the channel may reach start with this (once admitted).
  const std::string& scope() const { return scope_; }

 private:
  std::vector<std::uint8_t> ticket_;
  std::uint64_t checked_at_ = 0;
  bool checked_ = false;
  bool scoped_ = false;
  std::string scope_;
};

}  // namespace smb::transport
