#include "coordination.hpp"

#include "util/parse.hpp"
#include "wait_timeout.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <iterator>

namespace smb::server {

using protocol::Body;

namespace {

bool overlaps(std::uint64_t a_offset, std::uint64_t a_length, std::uint64_t b_offset, std::uint64_t b_length) {
  return a_offset < b_offset + b_length && b_offset < a_offset + a_length;
}

template <class List>
auto find_id(List& list, std::uint64_t id) {
  return std::find_if(list.begin(), list.end(), [id](const auto& e) { return e.id == id; });
}

// Disjoint ranges, merged as they are added: which bytes earlier waiters
// are queued for, while grant_waiters walks the queue.
class RangeSet {
 public:
  void add(std::uint64_t offset, std::uint64_t length) {
    std::uint64_t begin = offset, end = offset + length;
    auto it = ranges_.upper_bound(begin);
    if (it != ranges_.begin() && std::prev(it)->second >= begin) --it;
    while (it != ranges_.end() && it->first <= end) {
      begin = std::min(begin, it->first);
      end = std::max(end, it->second);
      it = ranges_.erase(it);
    }
    ranges_.emplace(begin, end);
  }
  bool overlaps(std::uint64_t offset, std::uint64_t length) const {
    auto it = ranges_.upper_bound(offset);
    if (it != ranges_.end() && it->first < offset + length) return true;
    return it != ranges_.begin() && std::prev(it)->second > offset;
  }

 private:
  std::map<std::uint64_t, std::uint64_t> ranges_;  // begin -> end
};

}  // namespace

Coordination::TimerPtr Coordination::start_timer(std::chrono::milliseconds after, std::function<void()> on_expiry) {
  auto timer = std::make_shared<boost::asio::steady_timer>(io_, after);
  timer->async_wait([on_expiry = std::move(on_expiry)](const boost::system::error_code& ec) {
    if (!ec) on_expiry();  // cancelled timers do nothing
  });
  return timer;
}

void Coordination::set_waiting(SessionId session, const std::string& name, std::uint64_t id) {
  if (session != kCallSession) waiting_[session] = Waiting{name, id};
}

void Coordination::clear_waiting(SessionId session, std::uint64_t id) {
  auto it = waiting_.find(session);
  if (it != waiting_.end() && it->second.id == id) waiting_.erase(it);
}

// ---------------------------------------------------------------- locks

bool Coordination::conflicts_with_holder(const Lock& lock, std::uint64_t offset, std::uint64_t length) {
  auto it = lock.holders.lower_bound(offset);  // first holder starting at or after offset
  if (it != lock.holders.end() && it->first < offset + length) return true;
  if (it == lock.holders.begin()) return false;
  const auto& before = *std::prev(it);
  return before.first + before.second.length > offset;
}

void Coordination::grant(const std::string& name, Lock& lock, SessionId session, std::uint64_t offset,
                         std::uint64_t length, std::chrono::milliseconds lease, const ReplyFn& reply) {
  const std::uint64_t token = next_token_++;
  auto timer = start_timer(lease, [this, name, token] {
    spdlog::info("lock {}: lease of token {} expired, releasing it", util::quoted(name), token);
    release(token);
  });
  lock.holders.emplace(offset, LockHolder{session, token, length, std::move(timer)});
  held_.emplace(token, HeldLock{name, offset});
  held_by_[session].insert(token);
  reply(protocol::ok_reply({{"token", token}}));
}

void Coordination::lock(SessionId session, const Body& request, const ReplyFn& reply) {
  const char* what = "lock";
  const auto name = protocol::get_name(request, "name", what);
  const auto offset = protocol::get_u64(request, "offset", what);
  const auto length = protocol::get_u64(request, "length", what);
  if (length == 0 || offset > UINT64_MAX - length)
    throw Error(Errc::invalid_argument, "lock " + util::quoted(name) + ": empty or overflowing range");
  const auto lease = wait_timeout(request, "lease_ms", what);
  const auto timeout = wait_timeout(request, "timeout_ms", what);
  if (auto held = held_by_.find(session); held != held_by_.end() && held->second.size() >= max_locks_per_session_)
    throw Error(Errc::no_space, "lock " + util::quoted(name) + ": this client already holds " +
                                    std::to_string(held->second.size()) +
                                    " locks here, the per-client limit (smbd --max-locks-per-client)");
  auto& lock = locks_[name];
  // FIFO: a request also waits behind an earlier waiter it conflicts with.
  const bool queued_conflict = std::any_of(lock.waiters.begin(), lock.waiters.end(), [&](const LockWaiter& w) {
    return overlaps(w.offset, w.length, offset, length);
  });
  const bool held = conflicts_with_holder(lock, offset, length);
  const auto forget_if_empty = [&] {
    if (lock.holders.empty() && lock.waiters.empty()) locks_.erase(name);
  };
  if (request.contains("restore") && protocol::get_bool(request, "restore", what)) {
    // A holder that holds at the other keeper: it comes first, or not at all.
    if (held) {
      forget_if_empty();
      throw Error(Errc::busy, "lock " + util::quoted(name) + ": cannot restore a hold here, another holder has the range");
    }
    return grant(name, lock, session, offset, length, lease, reply);
  }
  // In its grace, a range nobody holds or waits for here may still be held
  // at the other keeper by a holder about to restore it: the client asks
  // there first. (One held or waited for here is queued for as usual.)
  if (!queued_conflict && !held && request.contains("settled_only") &&
      protocol::get_bool(request, "settled_only", what)) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(grace_until_ - std::chrono::steady_clock::now());
    if (left.count() > 0) {
      forget_if_empty();
      return reply(protocol::ok_reply({{"grace_ms", static_cast<std::uint64_t>(left.count())}}));
    }
  }
  if (!queued_conflict && !held) return grant(name, lock, session, offset, length, lease, reply);
  const std::uint64_t id = next_token_++;
  auto timer = start_timer(timeout, [this, name, id, session] {
    auto found = locks_.find(name);
    if (found == locks_.end()) return;
    auto& waiters = found->second.waiters;
    auto it = find_id(waiters, id);
    if (it == waiters.end()) return;
    clear_waiting(session, id);
    auto waiter_reply = std::move(it->reply);
    waiters.erase(it);
    grant_waiters(name);  // a later waiter may have been queued behind this one only
    waiter_reply(protocol::error_reply(Errc::timeout, "lock " + util::quoted(name) + " was not granted in time"));
  });
  lock.waiters.push_back(LockWaiter{id, session, offset, length, lease, reply, std::move(timer)});
  set_waiting(session, name, id);
}

std::uint64_t Coordination::lock_waiters() const {
  std::uint64_t n = 0;
  for (const auto& [name, lock] : locks_) n += lock.waiters.size();
  return n;
}

void Coordination::grant_waiters(const std::string& name) {
  auto found = locks_.find(name);
  if (found == locks_.end()) return;
  auto& lock = found->second;
  RangeSet queued;  // ranges of earlier waiters still waiting
  for (auto it = lock.waiters.begin(); it != lock.waiters.end();) {
    if (queued.overlaps(it->offset, it->length) || conflicts_with_holder(lock, it->offset, it->length)) {
      queued.add(it->offset, it->length);
      ++it;
      continue;
    }
    it->timer->cancel();
    LockWaiter waiter = std::move(*it);
    it = lock.waiters.erase(it);
    clear_waiting(waiter.session, waiter.id);
    grant(name, lock, waiter.session, waiter.offset, waiter.length, waiter.lease, waiter.reply);
  }
  if (lock.holders.empty() && lock.waiters.empty()) locks_.erase(found);
}

void Coordination::release(std::uint64_t token) {
  auto held = held_.find(token);
  if (held == held_.end()) return;
  const std::string name = held->second.name;
  auto found = locks_.find(name);
  if (found != locks_.end()) {
    auto holder = found->second.holders.find(held->second.offset);
    if (holder != found->second.holders.end() && holder->second.token == token) {
      holder->second.lease->cancel();
      if (auto by = held_by_.find(holder->second.session); by != held_by_.end()) {
        by->second.erase(token);
        if (by->second.empty()) held_by_.erase(by);
      }
      found->second.holders.erase(holder);
    }
  }
  held_.erase(held);
  grant_waiters(name);
}

void Coordination::unlock(SessionId session, const Body& request, const ReplyFn& reply) {
  const char* what = "unlock";
  const auto name = protocol::get_name(request, "name", what);
  const auto token = protocol::get_u64(request, "token", what);
  auto by = held_by_.find(session);
  auto held = held_.find(token);
  if (by == held_by_.end() || !by->second.contains(token) || held == held_.end() || held->second.name != name)
    throw Error(Errc::not_found, "lock " + util::quoted(name) + " is not held by this client with token " +
                                     std::to_string(token) + " (its lease may have expired)");
  release(token);
  reply(protocol::ok_reply());
}

// ---------------------------------------------------------------- sessions

void Coordination::remove_waiting(const Waiting& w) {
  auto found = locks_.find(w.name);
  if (found == locks_.end()) return;
  auto it = find_id(found->second.waiters, w.id);
  if (it == found->second.waiters.end()) return;
  it->timer->cancel();
  found->second.waiters.erase(it);
  grant_waiters(w.name);
}

void Coordination::session_closed(SessionId session) {
  if (auto w = waiting_.find(session); w != waiting_.end()) {
    const Waiting waiting = w->second;
    waiting_.erase(w);
    remove_waiting(waiting);
  }
  if (auto by = held_by_.find(session); by != held_by_.end()) {
    const auto tokens = by->second;  // release() edits the set
    for (const auto token : tokens) {
      if (auto held = held_.find(token); held != held_.end())
        spdlog::info("lock {}: holder left, releasing token {}", util::quoted(held->second.name), token);
      release(token);
    }
  }
}

}  // namespace smb::server
