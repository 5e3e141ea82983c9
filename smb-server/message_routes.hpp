#pragma once
// Where every control message is served: one table (message_routes.cpp),
// one entry per message type. An entry says by which paths the message may
// arrive (a control connection, a data-path call), where its handler runs
// (the io thread, the worker pool) and which handler serves it. Adding a
// message is adding an entry; a type without one, or one arriving by a path
// its entry does not allow, is refused with a protocol error (never answered
// with another message's reply).
#include "barriers.hpp"
#include "coordination.hpp"
#include "metrics.hpp"
#include "repair_pauses.hpp"
#include "request_handler.hpp"
#include "version_waits.hpp"

#include <boost/asio.hpp>

namespace smb::server {

// Paths a request may arrive by (bit flags).
enum Arrival : unsigned {
  kControl = 1,  // a control connection (has a session)
  kCall = 2,     // a data-path call (transport.hpp): no session
};

enum class RunsOn {
  io_thread,  // the control server's thread, where coordination lives
  // Where the request arrives (the io thread for sessions, the transport's
  // thread for calls), with no hand-off on the way: for what is short and
  // thread-safe. A handler may still move large work (or work that would
  // wait for a lock) to the worker pool itself.
  arrival,
};

// What handlers reach.
struct Services {
  boost::asio::io_context& io;
  Metrics& metrics;
  boost::asio::thread_pool& workers;
  RequestHandler& requests;
  Coordination& coordination;
  VersionWaits& versions;
  Barriers& barriers;
  RepairPauses& pauses;
};

struct Request {
  SessionId session = 0;  // 0 for calls
  std::uint16_t type = 0;
  Arrival path = kControl;
  protocol::Body body;
  transport::Bytes payload;  // a call's raw payload (a vector op's x)
};

// Answers through `reply`, exactly once, now or later (coordination); it may
// throw, and its caller turns that into an error reply. A session's reply is
// sent on the io thread; a call's reply from any thread.
using Handler = void (*)(Services& services, Request& request, const ReplyFn& reply);

struct Route {
  protocol::MessageType type;
  unsigned arrivals;  // Arrival bits
  RunsOn runs_on;
  Handler handler;
};

// The route of `type` arriving by `path` (kControl or kCall). Throws
// Errc::protocol for an unknown type or one not served by that path.
const Route& route_for(std::uint16_t type, Arrival path);

}  // namespace smb::server
