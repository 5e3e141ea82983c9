#include "message_routes.hpp"

#include <array>
#include <string>

namespace smb::server {

namespace {

using protocol::Body;
using protocol::MessageType;

// A request the handler answers at once, on the thread it runs on.
template <Body (RequestHandler::*serve)(SessionId, const Body&)>
void at_once(Services& s, Request& r, const ReplyFn& reply) {
  reply((s.requests.*serve)(r.session, r.body));
}

// A request whose reply comes later (a wait, a lock, a barrier).
template <void (Coordination::*serve)(SessionId, const Body&, const ReplyFn&)>
void deferred(Services& s, Request& r, const ReplyFn& reply) {
  (s.coordination.*serve)(r.session, r.body, reply);
}

// Runs on the worker pool; then, on the io thread, wakes the buffer's
// version waiters and replies.
void vector_op(Services& s, Request& r, const ReplyFn& reply) {
  auto answer = replying(r.type, [&] { return s.requests.vector_op(r.body, std::move(r.payload)); });
  auto name = r.body.find("name");
  std::string advanced =
      protocol::is_ok(answer) && name != r.body.end() && name->is_string() ? name->get<std::string>() : std::string();
  boost::asio::post(s.io, [&s, answer = std::move(answer), advanced = std::move(advanced), reply, type = r.type] {
    guarded(type, reply, [&] {
      if (!advanced.empty()) s.coordination.version_advanced(advanced);
      reply(answer);
    });
  });
}

constexpr unsigned kBoth = kControl | kCall;
using enum RunsOn;

// Vector ops, version reads and version waits come as calls too: they carry
// bulk data or wait for data to change, so they travel beside the data.
constexpr std::array kRoutes{
    Route{MessageType::hello, kControl, io_thread, at_once<&RequestHandler::hello>},
    Route{MessageType::reserve_name, kControl, io_thread, at_once<&RequestHandler::reserve_name>},
    Route{MessageType::commit_layout, kControl, io_thread, at_once<&RequestHandler::commit_layout>},
    Route{MessageType::get_layout, kControl, io_thread, at_once<&RequestHandler::get_layout>},
    Route{MessageType::alloc_segment, kControl, io_thread, at_once<&RequestHandler::alloc_segment>},
    Route{MessageType::open_segment, kControl, io_thread, at_once<&RequestHandler::open_segment>},
    Route{MessageType::close_segment, kControl, io_thread, at_once<&RequestHandler::close_segment>},
    Route{MessageType::destroy, kControl, io_thread, at_once<&RequestHandler::destroy>},
    Route{MessageType::stat, kControl, io_thread, at_once<&RequestHandler::stat>},
    Route{MessageType::list_layouts, kControl, io_thread, at_once<&RequestHandler::list_layouts>},
    Route{MessageType::abandon_name, kControl, io_thread, at_once<&RequestHandler::abandon_name>},
    Route{MessageType::vector_op, kBoth, worker_pool, vector_op},
    Route{MessageType::get_version, kBoth, io_thread, at_once<&RequestHandler::get_version>},
    Route{MessageType::wait_version, kBoth, io_thread, deferred<&Coordination::wait_version>},
    Route{MessageType::lock, kControl, io_thread, deferred<&Coordination::lock>},
    Route{MessageType::unlock, kControl, io_thread, deferred<&Coordination::unlock>},
    Route{MessageType::barrier, kControl, io_thread, deferred<&Coordination::barrier>},
};

// Indexed by type, checked at compile time: one entry per type, in order.
consteval bool dense() {
  for (std::size_t i = 0; i < kRoutes.size(); ++i)
    if (static_cast<std::size_t>(kRoutes[i].type) != i + 1) return false;
  return true;
}
static_assert(dense(), "kRoutes: one entry per MessageType, in the enum's order");

}  // namespace

const Route& route_for(std::uint16_t type, Arrival path) {
  if (type < 1 || type > kRoutes.size())
    throw Error(Errc::protocol, "unknown control message type " + std::to_string(type));
  const Route& route = kRoutes[type - 1];
  if ((route.arrivals & path) == 0)
    throw Error(Errc::protocol, std::string(protocol::message_name(type)) +
                                    (path == kCall ? " is not served over the data path (use the control connection)"
                                                   : " is served only over the data path"));
  return route;
}

}  // namespace smb::server
