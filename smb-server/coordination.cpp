#include "coordination.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace smb::server {

using protocol::Body;
using protocol::MessageType;

namespace {

constexpr std::uint64_t kMaxWaitMs = 24ull * 3600 * 1000;

std::chrono::milliseconds duration_field(const Body& request, const char* field, const char* what) {
  const auto ms = protocol::get_u64(request, field, what);
  if (ms == 0 || ms > kMaxWaitMs)
    throw Error(Errc::invalid_argument, std::string(what) + ": " + field + " must be 1 ms to 24 h");
  return std::chrono::milliseconds(ms);
}

bool overlaps(std::uint64_t a_offset, std::uint64_t a_length, std::uint64_t b_offset, std::uint64_t b_length) {
  return a_offset < b_offset + b_length && b_offset < a_offset + a_length;
}

template <class List>
auto find_id(List& list, std::uint64_t id) {
  return std::find_if(list.begin(), list.end(), [id](const auto& e) { return e.id == id; });
}

}  // namespace

bool Coordination::handles(std::uint16_t type) {
  switch (static_cast<MessageType>(type)) {
    case MessageType::wait_version:
    case MessageType::lock:
    case MessageType::unlock:
    case MessageType::barrier: return true;
    default: return false;
  }
}

void Coordination::handle(SessionId session, std::uint16_t type, const Body& request, const ReplyFn& reply) {
  try {
    switch (static_cast<MessageType>(type)) {
      case MessageType::wait_version: return wait_version(session, request, reply);
      case MessageType::lock: return lock(session, request, reply);
      case MessageType::unlock: return unlock(session, request, reply);
      case MessageType::barrier: return barrier(session, request, reply);
      default: throw Error(Errc::protocol, "not a coordination message");
    }
  } catch (const Error& e) {
    reply(protocol::error_reply(e.code(), e.what()));
  }
}

Coordination::TimerPtr Coordination::start_timer(std::chrono::milliseconds after, std::function<void()> on_expiry) {
  auto timer = std::make_shared<boost::asio::steady_timer>(io_, after);
  timer->async_wait([on_expiry = std::move(on_expiry)](const boost::system::error_code& ec) {
    if (!ec) on_expiry();  // cancelled timers do nothing
  });
  return timer;
}

// ---------------------------------------------------------------- versions

void Coordination::wait_version(SessionId session, const Body& request, const ReplyFn& reply) {
  const char* what = "wait_version";
  const auto name = protocol::get_string(request, "name", what);
  const auto version = protocol::get_u64(request, "version", what);
  const auto timeout = duration_field(request, "timeout_ms", what);
  const auto now = registry_.version(name);  // throws not_found
  if (now >= version) return reply(protocol::ok_reply({{"version", now}}));
  const std::uint64_t id = next_token_++;
  auto timer = start_timer(timeout, [this, name, id, version] {
    auto& waiters = version_waiters_[name];
    auto it = find_id(waiters, id);
    if (it == waiters.end()) return;
    it->reply(protocol::error_reply(Errc::timeout, "buffer '" + name + "' did not reach version " +
                                                       std::to_string(version) + " in time"));
    waiters.erase(it);
  });
  version_waiters_[name].push_back(VersionWaiter{id, session, version, reply, std::move(timer)});
}

void Coordination::version_advanced(const std::string& name) {
  auto found = version_waiters_.find(name);
  if (found == version_waiters_.end()) return;
  std::uint64_t now = 0;
  try {
    now = registry_.version(name);
  } catch (const Error&) {
    return;  // destroyed meanwhile: the waiters time out
  }
  auto& waiters = found->second;
  for (auto it = waiters.begin(); it != waiters.end();) {
    if (it->version <= now) {
      it->timer->cancel();
      it->reply(protocol::ok_reply({{"version", now}}));
      it = waiters.erase(it);
    } else {
      ++it;
    }
  }
  if (waiters.empty()) version_waiters_.erase(found);
}

// ---------------------------------------------------------------- locks

void Coordination::grant(const std::string& name, Lock& lock, SessionId session, std::uint64_t offset,
                         std::uint64_t length, std::chrono::milliseconds lease, const ReplyFn& reply) {
  const std::uint64_t token = next_token_++;
  auto timer = start_timer(lease, [this, name, token] {
    spdlog::info("lock '{}': lease of token {} expired, releasing it", name, token);
    release(name, token);
  });
  lock.holders.push_back(LockHolder{session, token, offset, length, std::move(timer)});
  reply(protocol::ok_reply({{"token", token}}));
}

void Coordination::lock(SessionId session, const Body& request, const ReplyFn& reply) {
  const char* what = "lock";
  const auto name = protocol::get_string(request, "name", what);
  protocol::validate_name(name);
  const auto offset = protocol::get_u64(request, "offset", what);
  const auto length = protocol::get_u64(request, "length", what);
  if (length == 0 || offset > UINT64_MAX - length)
    throw Error(Errc::invalid_argument, "lock '" + name + "': empty or overflowing range");
  const auto lease = duration_field(request, "lease_ms", what);
  const auto timeout = duration_field(request, "timeout_ms", what);
  auto& lock = locks_[name];
  const bool conflict = std::any_of(lock.holders.begin(), lock.holders.end(), [&](const LockHolder& h) {
    return overlaps(h.offset, h.length, offset, length);
  });
  // FIFO: a request also waits behind an earlier waiter it conflicts with.
  const bool queued_conflict = std::any_of(lock.waiters.begin(), lock.waiters.end(), [&](const LockWaiter& w) {
    return overlaps(w.offset, w.length, offset, length);
  });
  if (!conflict && !queued_conflict) return grant(name, lock, session, offset, length, lease, reply);
  const std::uint64_t id = next_token_++;
  auto timer = start_timer(timeout, [this, name, id] {
    auto& waiters = locks_[name].waiters;
    auto it = find_id(waiters, id);
    if (it == waiters.end()) return;
    it->reply(protocol::error_reply(Errc::timeout, "lock '" + name + "' was not granted in time"));
    waiters.erase(it);
    grant_waiters(name);  // a later waiter may have been queued behind this one only
  });
  lock.waiters.push_back(LockWaiter{id, session, offset, length, lease, reply, std::move(timer)});
}

void Coordination::grant_waiters(const std::string& name) {
  auto found = locks_.find(name);
  if (found == locks_.end()) return;
  auto& lock = found->second;
  for (auto it = lock.waiters.begin(); it != lock.waiters.end();) {
    const bool blocked =
        std::any_of(lock.holders.begin(), lock.holders.end(),
                    [&](const LockHolder& h) { return overlaps(h.offset, h.length, it->offset, it->length); }) ||
        std::any_of(lock.waiters.begin(), it, [&](const LockWaiter& w) {
          return overlaps(w.offset, w.length, it->offset, it->length);
        });
    if (blocked) {
      ++it;
      continue;
    }
    it->timer->cancel();
    LockWaiter waiter = std::move(*it);
    it = lock.waiters.erase(it);
    grant(name, lock, waiter.session, waiter.offset, waiter.length, waiter.lease, waiter.reply);
  }
  if (lock.holders.empty() && lock.waiters.empty()) locks_.erase(found);
}

void Coordination::release(const std::string& name, std::uint64_t token) {
  auto found = locks_.find(name);
  if (found == locks_.end()) return;
  auto& holders = found->second.holders;
  auto it = std::find_if(holders.begin(), holders.end(), [token](const LockHolder& h) { return h.token == token; });
  if (it == holders.end()) return;
  it->lease->cancel();
  holders.erase(it);
  grant_waiters(name);
}

void Coordination::unlock(SessionId session, const Body& request, const ReplyFn& reply) {
  const char* what = "unlock";
  const auto name = protocol::get_string(request, "name", what);
  const auto token = protocol::get_u64(request, "token", what);
  auto found = locks_.find(name);
  const bool held = found != locks_.end() &&
                    std::any_of(found->second.holders.begin(), found->second.holders.end(),
                                [&](const LockHolder& h) { return h.token == token && h.session == session; });
  if (!held)
    throw Error(Errc::not_found, "lock '" + name + "' is not held by this client with token " +
                                     std::to_string(token) + " (its lease may have expired)");
  release(name, token);
  reply(protocol::ok_reply());
}

// ---------------------------------------------------------------- barriers

void Coordination::barrier(SessionId session, const Body& request, const ReplyFn& reply) {
  const char* what = "barrier";
  const auto name = protocol::get_string(request, "name", what);
  protocol::validate_name(name);
  const auto parties = protocol::get_u64(request, "parties", what);
  const auto timeout = duration_field(request, "timeout_ms", what);
  if (parties == 0 || parties > 1'000'000)
    throw Error(Errc::invalid_argument, "barrier '" + name + "': parties must be 1 to 1000000");
  auto& b = barriers_[name];
  if (b.arrived.empty()) b.parties = parties;
  if (b.parties != parties)
    throw Error(Errc::invalid_argument, "barrier '" + name + "' is for " + std::to_string(b.parties) +
                                            " parties, this client asked for " + std::to_string(parties));
  if (b.arrived.size() + 1 == parties) {
    for (auto& a : b.arrived) {
      a.timer->cancel();
      a.reply(protocol::ok_reply());
    }
    barriers_.erase(name);
    return reply(protocol::ok_reply());
  }
  const std::uint64_t id = next_token_++;
  auto timer = start_timer(timeout, [this, name, id] {
    auto& arrived = barriers_[name].arrived;
    auto it = find_id(arrived, id);
    if (it != arrived.end()) {
      it->reply(protocol::error_reply(Errc::timeout, "barrier '" + name + "': not every party arrived in time"));
      arrived.erase(it);
    }
    if (arrived.empty()) barriers_.erase(name);
  });
  b.arrived.push_back(Arrival{id, session, reply, std::move(timer)});
}

// ---------------------------------------------------------------- sessions

void Coordination::session_closed(SessionId session) {
  for (auto& [name, waiters] : version_waiters_)
    std::erase_if(waiters, [&](VersionWaiter& w) {
      if (w.session == session) w.timer->cancel();
      return w.session == session;
    });
  std::vector<std::pair<std::string, std::uint64_t>> held;
  for (auto& [name, lock] : locks_) {
    std::erase_if(lock.waiters, [&](LockWaiter& w) {
      if (w.session == session) w.timer->cancel();
      return w.session == session;
    });
    for (const auto& h : lock.holders)
      if (h.session == session) held.emplace_back(name, h.token);
  }
  for (const auto& [name, token] : held) {
    spdlog::info("lock '{}': holder left, releasing token {}", name, token);
    release(name, token);
  }
  // A barrier this client arrived at can never complete now: fail it for all.
  for (auto it = barriers_.begin(); it != barriers_.end();) {
    auto& arrived = it->second.arrived;
    const bool broken = std::any_of(arrived.begin(), arrived.end(), [&](const Arrival& a) { return a.session == session; });
    if (!broken) {
      ++it;
      continue;
    }
    for (auto& a : arrived) {
      a.timer->cancel();
      if (a.session != session)
        a.reply(protocol::error_reply(Errc::server_gone, "barrier '" + it->first +
                                                             "': a participant disconnected before it completed"));
    }
    it = barriers_.erase(it);
  }
}

}  // namespace smb::server
