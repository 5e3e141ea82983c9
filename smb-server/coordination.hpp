#pragma once
// Coordination that needs a reply later rather than at once: leased range
// locks (version waits: version_waits.hpp; barriers: barriers.hpp). It lives on the control
// server's io thread (every entry point runs there), so it needs no locks of
// its own; its timers are that thread's too.
//
// Failure handling: a session that closes releases its locks at once (the
// next waiter is granted). A holder that stays connected but stops
// renewing loses its lock when the lease runs out.
//
// Two keepers (docs/reliability.md, "Locks and barriers with two keepers"):
// a client locks a name at its home and then at the next server, and a
// holder that finds a keeper lost restores its hold there once it returns.
// A server that has just started cannot know which holds it lost, so for
// `grace` after its start it answers a request marked settled_only with
// the grace left instead of a grant; a restore is granted at once where no
// holder here conflicts.
//
// Cost: granted ranges of one lock never overlap, so they are kept by offset
// and a request finds a conflict in O(log holders); a release finds its
// holder by token in O(1). Waiters (at most one per waiting connection) are
// checked in FIFO order. A closing session touches only what it holds.
#include "protocol/messages.hpp"
#include "registry.hpp"
#include "replies.hpp"

#include <boost/asio.hpp>

#include <chrono>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>

namespace smb::server {

class Coordination {
 public:
  Coordination(boost::asio::io_context& io, std::uint64_t max_locks_per_session, std::chrono::milliseconds grace)
      : io_(io), max_locks_per_session_(max_locks_per_session), grace_until_(std::chrono::steady_clock::now() + grace) {}

  // The deferred requests (message_routes.cpp): each answers through
  // `reply` once its condition holds, its timeout passes or its party goes.
  // They throw smb::Error for a request that is wrong from the start.
  void lock(SessionId session, const protocol::Body& request, const ReplyFn& reply);
  void unlock(SessionId session, const protocol::Body& request, const ReplyFn& reply);

  void session_closed(SessionId session);

  // Lock requests queued behind holders (io thread; for stat's `waiting`).
  std::uint64_t lock_waiters() const;

 private:
  using TimerPtr = std::shared_ptr<boost::asio::steady_timer>;

  struct LockHolder {
    SessionId session;
    std::uint64_t token;
    std::uint64_t length;
    TimerPtr lease;
  };
  struct LockWaiter {
    std::uint64_t id;
    SessionId session;
    std::uint64_t offset, length;
    std::chrono::milliseconds lease;
    ReplyFn reply;
    TimerPtr timer;
  };
  struct Lock {
    std::map<std::uint64_t, LockHolder> holders;  // by offset; ranges disjoint
    std::list<LockWaiter> waiters;                // FIFO
  };
  // What a session waits for (it has at most one request outstanding): a lock.
  struct Waiting {
    std::string name;
    std::uint64_t id;
  };
  struct HeldLock {
    std::string name;
    std::uint64_t offset;
  };

  static bool conflicts_with_holder(const Lock& lock, std::uint64_t offset, std::uint64_t length);
  void grant(const std::string& name, Lock& lock, SessionId session, std::uint64_t offset, std::uint64_t length,
             std::chrono::milliseconds lease, const ReplyFn& reply);
  void grant_waiters(const std::string& name);
  void release(std::uint64_t token);
  void remove_waiting(const Waiting& waiting);
  TimerPtr start_timer(std::chrono::milliseconds after, std::function<void()> on_expiry);
  void set_waiting(SessionId session, const std::string& name, std::uint64_t id);
  void clear_waiting(SessionId session, std::uint64_t id);

  boost::asio::io_context& io_;
  const std::uint64_t max_locks_per_session_;
  const std::chrono::steady_clock::time_point grace_until_;
  std::map<std::string, Lock> locks_;
  std::unordered_map<std::uint64_t, HeldLock> held_;             // token -> where it is held
  std::map<SessionId, std::set<std::uint64_t>> held_by_;         // session -> tokens
  std::map<SessionId, Waiting> waiting_;                         // control sessions only
  std::uint64_t next_token_ = 1;
};

}  // namespace smb::server
