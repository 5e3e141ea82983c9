#pragma once
// Coordination that needs a reply later rather than at once: waiting for a
// buffer version, leased range locks, and barriers. It lives on the control
// server's io thread (every entry point runs there), so it needs no locks of
// its own; its timers are that thread's too.
//
// Failure handling: a session that closes releases its locks at once (the
// next waiter is granted), and breaks every barrier it has arrived at (the
// others get an error, never a hang). A holder that stays connected but stops
// renewing loses its lock when the lease runs out.
#include "protocol/messages.hpp"
#include "registry.hpp"

#include <boost/asio.hpp>

#include <chrono>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>

namespace smb::server {

// Sends the reply to one deferred request (exactly once).
using ReplyFn = std::function<void(protocol::Body)>;

class Coordination {
 public:
  Coordination(boost::asio::io_context& io, Registry& registry) : io_(io), registry_(registry) {}

  // True if `type` is one of ours; then the reply comes through `reply`.
  static bool handles(std::uint16_t type);
  // Errors, thrown or not, become an error reply.
  void handle(SessionId session, std::uint16_t type, const protocol::Body& request, const ReplyFn& reply);

  // A vector op advanced `name`'s version (posted here from the worker pool).
  void version_advanced(const std::string& name);
  void session_closed(SessionId session);

 private:
  using Clock = std::chrono::steady_clock;
  using TimerPtr = std::shared_ptr<boost::asio::steady_timer>;

  struct VersionWaiter {
    std::uint64_t id;
    SessionId session;
    std::uint64_t version;
    ReplyFn reply;
    TimerPtr timer;
  };
  struct LockHolder {
    SessionId session;
    std::uint64_t token;
    std::uint64_t offset, length;
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
    std::list<LockHolder> holders;
    std::list<LockWaiter> waiters;  // FIFO
  };
  struct Arrival {
    std::uint64_t id;
    SessionId session;
    ReplyFn reply;
    TimerPtr timer;
  };
  struct Barrier {
    std::uint64_t parties = 0;
    std::list<Arrival> arrived;
  };

  void wait_version(SessionId session, const protocol::Body& request, const ReplyFn& reply);
  void lock(SessionId session, const protocol::Body& request, const ReplyFn& reply);
  void unlock(SessionId session, const protocol::Body& request, const ReplyFn& reply);
  void barrier(SessionId session, const protocol::Body& request, const ReplyFn& reply);

  void grant(const std::string& name, Lock& lock, SessionId session, std::uint64_t offset, std::uint64_t length,
             std::chrono::milliseconds lease, const ReplyFn& reply);
  void grant_waiters(const std::string& name);
  void release(const std::string& name, std::uint64_t token);
  TimerPtr start_timer(std::chrono::milliseconds after, std::function<void()> on_expiry);

  boost::asio::io_context& io_;
  Registry& registry_;
  std::map<std::string, std::list<VersionWaiter>> version_waiters_;
  std::map<std::string, Lock> locks_;
  std::map<std::string, Barrier> barriers_;
  std::uint64_t next_token_ = 1;
};

}  // namespace smb::server
