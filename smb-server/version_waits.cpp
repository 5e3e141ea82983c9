#include "version_waits.hpp"

#include "util/parse.hpp"

#include <vector>

namespace smb::server {

VersionWaits::VersionWaits(boost::asio::io_context& io, Registry& registry)
    : io_(io), registry_(registry), timer_(io, [this] { expire(); }) {}

void VersionWaits::wait(SessionId session, const std::string& name, std::uint64_t version,
                        std::chrono::milliseconds timeout, const VersionReplyFn& reply) {
  ++count_;  // before reading the version: see pending()
  std::uint64_t now = 0;
  {
    std::lock_guard lock(mutex_);
    try {
      now = registry_.store().version(name);  // throws not_found
    } catch (...) {
      --count_;
      throw;
    }
    if (now < version) {
      const auto deadline = Clock::now() + timeout;
      waiters_[name].push_back(Waiter{session, version, deadline, reply});
      timer_.arm(deadline);
      return;
    }
  }
  --count_;
  reply(protocol::FixedReply{Errc::ok, now, {}});
}

void VersionWaits::advanced(const std::string& name) {
  if (!pending()) return;
  std::vector<Waiter> woken;
  std::uint64_t now = 0;
  {
    std::lock_guard lock(mutex_);
    auto found = waiters_.find(name);
    if (found == waiters_.end()) return;
    try {
      now = registry_.store().version(name);
    } catch (const Error&) {
      return;  // destroyed meanwhile: the waiters time out
    }
    auto& list = found->second;
    for (auto it = list.begin(); it != list.end();) {
      if (it->version <= now) {
        woken.push_back(std::move(*it));
        it = list.erase(it);
      } else {
        ++it;
      }
    }
    if (list.empty()) waiters_.erase(found);
    count_ -= woken.size();
  }
  for (auto& w : woken) deliver(w, protocol::FixedReply{Errc::ok, now, {}});
}

// A call's reply goes from any thread (its transport queues it); a session's
// is written on the io thread.
void VersionWaits::deliver(Waiter& waiter, protocol::FixedReply answer) {
  if (waiter.session == kCallSession) return waiter.reply(std::move(answer));
  boost::asio::post(io_, [reply = std::move(waiter.reply), answer = std::move(answer)] { reply(answer); });
}

void VersionWaits::session_closed(SessionId session) {
  std::lock_guard lock(mutex_);
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    count_ -= std::erase_if(it->second, [session](const Waiter& w) { return w.session == session; });
    it = it->second.empty() ? waiters_.erase(it) : std::next(it);
  }
}

void VersionWaits::expire() {
  std::vector<std::pair<std::string, Waiter>> late;
  {
    std::lock_guard lock(mutex_);
    const auto now = Clock::now();
    std::optional<Clock::time_point> next;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      auto& list = it->second;
      for (auto w = list.begin(); w != list.end();) {
        if (w->deadline <= now) {
          late.emplace_back(it->first, std::move(*w));
          w = list.erase(w);
        } else {
          if (!next || w->deadline < *next) next = w->deadline;
          ++w;
        }
      }
      it = list.empty() ? waiters_.erase(it) : std::next(it);
    }
    count_ -= late.size();
    if (next) timer_.arm(*next);
  }
  for (auto& [name, w] : late)
    deliver(w, protocol::FixedReply{Errc::timeout, 0,
                                    "buffer " + util::quoted(name) + " did not reach version " +
                                        std::to_string(w.version) + " in time"});
}

}  // namespace smb::server
