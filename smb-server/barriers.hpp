#pragma once
// Barriers: N parties meet under a name on the name's home server. Kept apart
// from Coordination (io-thread state) for the same reason as version waits:
// a barrier that comes as a data-path call (barrier_call) is met where it
// arrives, on the transport's thread, and its last party answers every
// other from there, so a barrier costs about one call round trip rather than
// hand-offs to the io thread and the control connections' TCP. Only
// timeouts need the io thread (deadline_timer.hpp).
//
// A party that goes breaks the barrier for the others (server_gone, never a
// hang): a control connection's arrival belongs to its session; a call names
// the session of its client's control connection, whose close ends it.
#include "deadline_timer.hpp"
#include "registry.hpp"
#include "replies.hpp"

#include <boost/asio.hpp>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace smb::server {

class Barriers {
 public:
  explicit Barriers(boost::asio::io_context& io);

  // `session` arrives at barrier `name` of `parties`. Every party is answered
  // when the last arrives; this one alone with Errc::timeout after `timeout`;
  // all with Errc::server_gone when a party's session closes first. The
  // reply may come from any thread. Any thread; throws smb::Error for a wrong
  // request.
  void arrive(SessionId session, const std::string& name, std::uint64_t parties, std::chrono::milliseconds timeout,
              const VersionReplyFn& reply);

  // The session's arrivals break their barriers (io thread).
  void session_closed(SessionId session);

  // Parties that arrived and wait for the others (for stat's `waiting`).
  std::uint64_t parties_waiting();

 private:
  using Clock = DeadlineTimer::Clock;
  struct Arrival {
    SessionId session;
    Clock::time_point deadline;
    VersionReplyFn reply;
  };
  struct Barrier {
    std::uint64_t parties = 0;
    std::vector<Arrival> arrived;
  };

  void expire();  // io thread: the earliest deadline passed

  std::mutex mutex_;
  std::unordered_map<std::string, Barrier> barriers_;
  DeadlineTimer timer_;
};

}  // namespace smb::server
