#include "message_routes.hpp"

#include "vector_runs.hpp"
#include "wait_timeout.hpp"

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
void version_wait(Services& s, Request& r, const ReplyFn& reply) {
  const char* what = "wait_version";
  s.versions.wait(r.session, protocol::get_name(r.body, "name", what), protocol::get_u64(r.body, "version", what),
                  wait_timeout(r.body, "timeout_ms", what),
                  [reply](protocol::FixedReply answer) { reply(version_body(answer)); });
}

// A barrier from a session: replied to on the io thread.
void barrier(Services& s, Request& r, const ReplyFn& reply) {
  const char* what = "barrier";
  s.barriers.arrive(r.session, protocol::get_name(r.body, "name", what), protocol::get_u64(r.body, "parties", what),
                    wait_timeout(r.body, "timeout_ms", what),
                    [reply](protocol::FixedReply answer) {
                      reply(answer.code == Errc::ok ? protocol::ok_reply()
                                                    : protocol::error_reply(answer.code, answer.message));
                    },
                    /*reply_on_io=*/true);
}

// A request whose reply comes later (a lock).
template <void (Coordination::*serve)(SessionId, const Body&, const ReplyFn&)>
void deferred(Services& s, Request& r, const ReplyFn& reply) {
  (s.coordination.*serve)(r.session, r.body, reply);
}

// An auth message where no challenge is outstanding.
// stat, with what waits here now: tests and operators can wait for a wait
// instead of sleeping past it. (The io thread: lock waiters are its state;
// barriers and version waits count for themselves.)
void stat(Services& s, Request& r, const ReplyFn& reply) {
  auto answer = s.requests.stat(r.session, r.body);
  answer["waiting"] = {{"versions", s.versions.waiting()},
                       {"barrier_parties", s.barriers.parties_waiting()},
                       {"locks", s.coordination.lock_waiters()}};
  reply(std::move(answer));
}

void auth_out_of_turn(Services&, Request&, const ReplyFn&) {
  throw Error(Errc::protocol, "auth: no challenge to answer (this session is authenticated, or its server asks for no "
                              "secret)");
}

// A vector_op message (a control connection's: calls come as vector_call,
// see data_path_calls.cpp): runs as vector_runs.hpp says; a session's reply
// goes out on the io thread.
void vector_op(Services& s, Request& r, const ReplyFn& reply) {
  auto request = RequestHandler::vector_request(r.body, std::move(r.payload));
  run_vector_op(s, r.type, std::move(request), [&io = s.io, reply, type = r.type](auto fixed, bool on_arrival) {
    auto answer = version_body(fixed);
    if (on_arrival) return reply(std::move(answer));
    boost::asio::post(io, [answer = std::move(answer), reply, type] { guarded(type, reply, [&] { reply(answer); }); });
  });
}

// A repair's end: the record takes the repaired runs, then its holders go on.
void end_repair(Services& s, Request& r, const ReplyFn& reply) {
  reply(s.requests.end_repair(r.session, r.body));
  s.pauses.resume(protocol::get_name(r.body, "name", "end_repair"));
}

// A copy newly recorded stale: the buffer's holders learn it through their watchers.
void mark_stale(Services& s, Request& r, const ReplyFn& reply) {
  auto answer = s.requests.mark_stale(r.session, r.body);
  const bool added = answer.value("added", false);
  reply(std::move(answer));
  if (added) s.pauses.stale_marked(protocol::get_name(r.body, "name", "mark_stale"));
}

// Online repair's pauses (repair_pauses.hpp), answered at once or later.
template <protocol::Body (RepairPauses::*serve)(SessionId, const protocol::Body&)>
void pauses_at_once(Services& s, Request& r, const ReplyFn& reply) {
  reply((s.pauses.*serve)(r.session, r.body));
}
template <void (RepairPauses::*serve)(SessionId, const protocol::Body&, const ReplyFn&)>
void pauses_deferred(Services& s, Request& r, const ReplyFn& reply) {
  (s.pauses.*serve)(r.session, r.body, reply);
}

// Digests read a whole copy (a repair's compare): on the worker pool, so
// that a large one does not hold up other clients' control requests.
void segment_digest(Services& s, Request& r, const ReplyFn& reply) {
  boost::asio::post(s.workers, [&s, body = std::move(r.body), reply, type = r.type] {
    auto answer = replying(type, [&] { return s.requests.segment_digest(body); });
    boost::asio::post(s.io, [answer = std::move(answer), reply, type] { guarded(type, reply, [&] { reply(answer); }); });
  });
}

// A repaired copy's version: version waits on it may have been reached.
void set_version(Services& s, Request& r, const ReplyFn& reply) {
  const auto name = protocol::get_segment_name(r.body, "name", "set_version");
  reply(s.requests.set_version(r.session, r.body));
  s.versions.advanced(name);
}

using enum RunsOn;

// Vector ops, version reads and version waits come as calls too: they carry
// bulk data or wait for data to change, so they travel beside the data, as
// vector_call and version_call with fixed binary bodies.
constexpr std::array kRoutes{
    Route{MessageType::hello, kControl, io_thread, at_once<&RequestHandler::hello>},
    Route{MessageType::reserve_name, kControl, io_thread, at_once<&RequestHandler::reserve_name>},
    Route{MessageType::commit_layout, kControl, io_thread, at_once<&RequestHandler::commit_layout>},
    Route{MessageType::get_layout, kControl, io_thread, at_once<&RequestHandler::get_layout>},
    Route{MessageType::alloc_segment, kControl, io_thread, at_once<&RequestHandler::alloc_segment>},
    Route{MessageType::open_segment, kControl, io_thread, at_once<&RequestHandler::open_segment>},
    Route{MessageType::close_segment, kControl, io_thread, at_once<&RequestHandler::close_segment>},
    Route{MessageType::destroy, kControl, io_thread, at_once<&RequestHandler::destroy>},
    Route{MessageType::stat, kControl, io_thread, stat},
    Route{MessageType::list_layouts, kControl, io_thread, at_once<&RequestHandler::list_layouts>},
    Route{MessageType::abandon_name, kControl, io_thread, at_once<&RequestHandler::abandon_name>},
    Route{MessageType::vector_op, kControl, arrival, vector_op},
    Route{MessageType::get_version, kControl, arrival, at_once<&RequestHandler::get_version>},
    Route{MessageType::wait_version, kControl, arrival, version_wait},
    Route{MessageType::lock, kControl, io_thread, deferred<&Coordination::lock>},
    Route{MessageType::unlock, kControl, io_thread, deferred<&Coordination::unlock>},
    Route{MessageType::barrier, kControl, io_thread, barrier},
    // Their bodies are not MessagePack: data_path_calls.cpp serves them
    // before this table's handlers (fixed_calls.hpp).
    Route{MessageType::vector_call, kCall, arrival, nullptr},
    Route{MessageType::version_call, kCall, arrival, nullptr},
    Route{MessageType::barrier_call, kCall, arrival, nullptr},
    // Only a session's answer to its hello's challenge (control_session.cpp).
    Route{MessageType::auth, kControl, io_thread, auth_out_of_turn},
    Route{MessageType::begin_repair, kControl, io_thread, at_once<&RequestHandler::begin_repair>},
    Route{MessageType::end_repair, kControl, io_thread, end_repair},
    Route{MessageType::hold_layout, kControl, io_thread, pauses_at_once<&RepairPauses::hold>},
    Route{MessageType::set_version, kControl, io_thread, set_version},
    Route{MessageType::release_layout, kControl, io_thread, pauses_at_once<&RepairPauses::release>},
    Route{MessageType::watch_repairs, kControl, io_thread, pauses_deferred<&RepairPauses::watch>},
    Route{MessageType::ack_pause, kControl, io_thread, pauses_deferred<&RepairPauses::ack>},
    Route{MessageType::pause_holders, kControl, io_thread, pauses_deferred<&RepairPauses::pause>},
    Route{MessageType::segment_digest, kControl, io_thread, segment_digest},
    Route{MessageType::mark_stale, kControl, io_thread, mark_stale},
    Route{MessageType::atomic_call, kCall, arrival, nullptr},  // fixed body, like vector_call
    Route{MessageType::segment_clients, kControl, io_thread, at_once<&RequestHandler::segment_clients>},
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
