#pragma once
// Where every message is served: one table (message_routes.cpp), one entry
// per message of the schema (protocol/message_schema.hpp), in its order. The
// schema says by which path a message arrives (a control connection, a
// data-path call); the entry names the handler that serves a control
// message. A type the schema lacks, or one arriving by the other path, is
// refused with a protocol error (never answered with another message's
// reply). The calls' entries have no handler: serve_call decodes their
// fixed bodies itself (data_path_calls.cpp).
#include "barriers.hpp"
#include "coordination.hpp"
#include "copy_puller.hpp"
#include "metrics.hpp"
#include "repair_pauses.hpp"
#include "request_handler.hpp"
#include "version_waits.hpp"

#include <boost/asio.hpp>

namespace smb::server {

// The path a request arrived by.
enum Arrival : unsigned {
  kControl = 1,  // a control connection (has a session); handlers run on the io thread
  kCall = 2,     // a data-path call (transport.hpp): no session
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
  CopyPuller& puller;
};

// A control connection's request.
struct Request {
  SessionId session = 0;
  std::uint16_t type = 0;
  protocol::Body body;
  std::string_view scope;  // the session's credential prefix (empty: every name)
};

// Runs on the io thread. Answers through `reply`, exactly once, now or later
// (coordination), on the io thread; it may throw, and its caller turns that
// into an error reply.
using Handler = void (*)(Services& services, Request& request, const ReplyFn& reply);

struct Route {
  protocol::MessageType type;
  Handler handler = nullptr;  // a control message's; none for a call
  bool call = false;          // a call: served by serve_call from its fixed body

  // A call's route (no handler: data_path_calls.cpp decodes it).
  static constexpr Route for_call(protocol::MessageType type) { return Route{type, nullptr, true}; }
};

// The route of `type` arriving by `path` (kControl or kCall). Throws
// Errc::protocol for an unknown type or one the schema sends by the other
// path.
const Route& route_for(std::uint16_t type, Arrival path);

}  // namespace smb::server
