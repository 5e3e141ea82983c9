#include "channel_tickets.hpp"

#include "protocol/auth.hpp"

namespace smb::server {

std::vector<std::uint8_t> ChannelTickets::issue(SessionId session, const std::string& scope) {
  auto random = protocol::make_challenge();  // 32 bytes from the OS's random source
  std::vector<std::uint8_t> ticket(random.begin(), random.begin() + transport::kTicketLength);
  auto kept = protocol::digest(ticket);
  std::lock_guard lock(mutex_);
  if (auto old = by_session_.find(session); old != by_session_.end()) live_.erase(old->second);
  by_session_[session] = kept;
  live_.emplace(std::move(kept), scope);
  return ticket;
}

void ChannelTickets::revoke(SessionId session) {
  {
    std::lock_guard lock(mutex_);
    auto it = by_session_.find(session);
    if (it == by_session_.end()) return;
    live_.erase(it->second);
    by_session_.erase(it);
  }
  revocations_.fetch_add(1, std::memory_order_release);
}

std::optional<std::string> ChannelTickets::admits(std::span<const std::uint8_t> ticket) const {
  if (ticket.size() != transport::kTicketLength) return std::nullopt;
  const auto wanted = protocol::digest(ticket);
  std::lock_guard lock(mutex_);
  auto it = live_.find(wanted);
  if (it == live_.end()) return std::nullopt;
  return it->second;
}

transport::ChannelAdmission ChannelTickets::admission() const {
  return {[this](std::span<const std::uint8_t> ticket) { return admits(ticket); }, &revocations_};
}

}  // namespace smb::server
