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

// A version wait: answered at once, or later by the op that gets the buffer
// there, wherever that runs.
void version_wait(Services& s, Request& r, const ReplyFn& reply) { s.versions.wait(r.session, r.body, reply); }

// A request whose reply comes later (a lock, a barrier).
template <void (Coordination::*serve)(SessionId, const Body&, const ReplyFn&)>
void deferred(Services& s, Request& r, const ReplyFn& reply) {
  (s.coordination.*serve)(r.session, r.body, reply);
}

// Vector ops of at most this many bytes of x run where they arrive: a few
// microseconds of memory time, less than a hand-off to another thread costs.
constexpr std::uint64_t kInlineVectorBytes = 64 * 1024;

// count x element size as the request states it; the largest value when it
// cannot tell (the registry reports what is wrong, on the pool).
std::uint64_t vector_work_bytes(const Body& body) {
  const auto count = body.find("count");
  const auto dtype = body.find("dtype");
  if (count == body.end() || dtype == body.end() || !count->is_number_unsigned() || !dtype->is_number_unsigned())
    return UINT64_MAX;
  const auto type = dtype->get<std::uint64_t>();
  const std::size_t size = type > 0xff ? 0 : element_size(static_cast<DType>(type));
  const auto n = count->get<std::uint64_t>();
  return size == 0 || n > UINT64_MAX / size ? UINT64_MAX : n * size;
}

// Wakes the buffer's version waiters, here (VersionWaits is thread-safe,
// and costs nothing when nobody waits), and replies: a call's reply at once,
// from this thread; a session's on the io thread.
void finish_vector_op(Services& s, const Request& r, Body answer, const ReplyFn& reply, bool on_io_thread) {
  auto name = r.body.find("name");
  if (protocol::is_ok(answer) && s.versions.pending() && name != r.body.end() && name->is_string())
    s.versions.advanced(name->get<std::string>());
  if (on_io_thread || r.path == kCall) return reply(std::move(answer));
  boost::asio::post(s.io, [answer = std::move(answer), reply, type = r.type] {
    guarded(type, reply, [&] { reply(answer); });
  });
}

// A small op runs here, where it arrived, unless another op holds the buffer;
// a large or blocked one goes to the worker pool, which may wait.
void vector_op(Services& s, Request& r, const ReplyFn& reply) {
  if (vector_work_bytes(r.body) <= kInlineVectorBytes) {
    std::optional<Body> answer;
    try {
      answer = s.requests.vector_op(r.body, r.payload, /*wait=*/false);
    } catch (...) {
      answer = current_error_reply(r.type);
    }
    if (answer) return finish_vector_op(s, r, std::move(*answer), reply, r.path == kControl);
  }
  boost::asio::post(s.workers, [&s, r = std::move(r), reply]() mutable {
    auto answer = replying(r.type, [&] { return *s.requests.vector_op(r.body, r.payload, /*wait=*/true); });
    finish_vector_op(s, r, std::move(answer), reply, false);
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
    Route{MessageType::vector_op, kBoth, arrival, vector_op},
    Route{MessageType::get_version, kBoth, arrival, at_once<&RequestHandler::get_version>},
    Route{MessageType::wait_version, kBoth, arrival, version_wait},
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
