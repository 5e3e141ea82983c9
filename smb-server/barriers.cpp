#include "barriers.hpp"

#include "util/parse.hpp"

namespace smb::server {

namespace {
constexpr std::uint64_t kMaxParties = 1'000'000;
}

Barriers::Barriers(boost::asio::io_context& io) : timer_(io, [this] { expire(); }) {}

void Barriers::arrive(SessionId session, const std::string& name, std::uint64_t parties,
                      std::chrono::milliseconds timeout, const VersionReplyFn& reply) {
  if (parties == 0 || parties > kMaxParties)
    throw Error(Errc::invalid_argument, "barrier " + util::quoted(name) + ": parties must be 1 to " +
                                            std::to_string(kMaxParties));
  std::vector<Arrival> met;
  {
    std::lock_guard lock(mutex_);
    auto& b = barriers_[name];
    if (b.arrived.empty()) b.parties = parties;
    if (b.parties != parties) {
      const auto expected = b.parties;
      if (b.arrived.empty()) barriers_.erase(name);
      throw Error(Errc::invalid_argument, "barrier " + util::quoted(name) + " is for " + std::to_string(expected) +
                                              " parties, this client asked for " + std::to_string(parties));
    }
    if (b.arrived.size() + 1 < parties) {
      const auto deadline = Clock::now() + timeout;
      b.arrived.push_back(Arrival{session, deadline, reply});
      timer_.arm(deadline);
      return;
    }
    met = std::move(b.arrived);
    barriers_.erase(name);
  }
  for (auto& a : met) a.reply({});
  reply({});
}

std::uint64_t Barriers::parties_waiting() {
  std::lock_guard lock(mutex_);
  std::uint64_t n = 0;
  for (const auto& [name, b] : barriers_) n += b.arrived.size();
  return n;
}

void Barriers::session_closed(SessionId session) {
  std::vector<std::pair<std::string, Arrival>> broken;
  {
    std::lock_guard lock(mutex_);
    for (auto it = barriers_.begin(); it != barriers_.end();) {
      auto& arrived = it->second.arrived;
      if (std::none_of(arrived.begin(), arrived.end(), [session](const Arrival& a) { return a.session == session; })) {
        ++it;
        continue;
      }
      // A barrier this client arrived at can never complete now: fail it for all.
      for (auto& a : arrived)
        if (a.session != session) broken.emplace_back(it->first, std::move(a));
      it = barriers_.erase(it);
    }
  }
  for (auto& [name, a] : broken)
    a.reply({Errc::server_gone, 0, "barrier " + util::quoted(name) + ": a participant disconnected before it completed"});
}

void Barriers::expire() {
  std::vector<std::pair<std::string, Arrival>> late;
  {
    std::lock_guard lock(mutex_);
    const auto now = Clock::now();
    std::optional<Clock::time_point> next;
    for (auto it = barriers_.begin(); it != barriers_.end();) {
      auto& arrived = it->second.arrived;
      for (auto a = arrived.begin(); a != arrived.end();) {
        if (a->deadline <= now) {
          late.emplace_back(it->first, std::move(*a));
          a = arrived.erase(a);
        } else {
          if (!next || a->deadline < *next) next = a->deadline;
          ++a;
        }
      }
      it = arrived.empty() ? barriers_.erase(it) : std::next(it);
    }
    if (next) timer_.arm(*next);
  }
  for (auto& [name, a] : late)
    a.reply({Errc::timeout, 0, "barrier " + util::quoted(name) + ": not every party arrived in time"});
}

}  // namespace smb::server
