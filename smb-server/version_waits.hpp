#pragma once
// Version waits: a client waits until a buffer's version reaches v, the
// "notify" half of a training step's chain (write, accumulate, notify, wait,
// read). Kept apart from Coordination, whose state lives on the io thread: a
// wait that comes as a call is registered where it arrives (the transport's
// thread), and the vector op that advances the version wakes it where that op
// ran, usually the same thread, so notify-to-wake crosses no thread. Only
// timeouts need the io thread (deadline_timer.hpp).
#include "deadline_timer.hpp"
#include "protocol/messages.hpp"
#include "registry.hpp"
#include "replies.hpp"

#include <boost/asio.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace smb::server {

class VersionWaits {
 public:
  VersionWaits(boost::asio::io_context& io, Registry& registry);

  // Until `name`'s version here reaches `version`: answers with the version
  // at once when the buffer is there already, else when an op gets it there
  // (from that op's thread for calls; on the io thread for sessions), or
  // with Errc::timeout after `timeout`. Any thread; throws smb::Error when
  // there is no such buffer.
  void wait(SessionId session, const std::string& name, std::uint64_t version, std::chrono::milliseconds timeout,
            const VersionReplyFn& reply);

  // An op advanced `name`'s version. Any thread; cheap when nobody waits.
  void advanced(const std::string& name);

  // Whether any wait is pending. A waiter counts itself before it reads the
  // version and an op advances the version before it asks (both sequentially
  // consistent), so an op that sees false has no waiter to wake.
  bool pending() const { return count_.load() != 0; }
  // How many waits are pending (for stat's `waiting`).
  std::uint64_t waiting() const { return count_.load(); }

  // The session's waits end without a reply (io thread).
  void session_closed(SessionId session);

 private:
  using Clock = std::chrono::steady_clock;
  struct Waiter {
    SessionId session;
    std::uint64_t version;
    Clock::time_point deadline;
    VersionReplyFn reply;
  };

  void deliver(Waiter& waiter, protocol::FixedReply answer);
  void expire();  // io thread: the earliest deadline passed

  boost::asio::io_context& io_;
  Registry& registry_;
  std::mutex mutex_;
  std::map<std::string, std::list<Waiter>> waiters_;  // by buffer name
  std::atomic<std::size_t> count_{0};                 // waiters, and any being added
  DeadlineTimer timer_;
};

}  // namespace smb::server
