#include "message_routes.hpp"

#include "replies.hpp"
#include "util/parse.hpp"

#include <array>
#include <chrono>
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

// A request whose reply comes later (a lock).
template <void (Coordination::*serve)(SessionId, const Body&, const ReplyFn&)>
void deferred(Services& s, Request& r, const ReplyFn& reply) {
  (s.coordination.*serve)(r.session, r.body, reply);
}

// stat, with what waits here now: tests and operators can wait for a wait
// instead of sleeping past it. (The io thread: lock waiters are its state;
// barriers and version waits count for themselves.)
void stat(Services& s, Request& r, const ReplyFn& reply) {
  auto answer = s.requests.stat(r.body, r.scope);
  answer["waiting"] = {{"versions", s.versions.waiting()},
                       {"barrier_parties", s.barriers.parties_waiting()},
                       {"locks", s.coordination.lock_waiters()}};
  reply(std::move(answer));
}

void list_layouts(Services& s, Request& r, const ReplyFn& reply) { reply(s.requests.list_layouts(r.body, r.scope)); }

// An auth message where no challenge is outstanding.
void auth_out_of_turn(Services&, Request&, const ReplyFn&) {
  throw Error(Errc::protocol, "auth: no challenge to answer (this session is authenticated, or its server asks for no "
                              "secret)");
}

// A repair's start: the record is taken, and the pauses note who holds the
// buffer from now on (an untouched buffer's copy needs no digest pass).
void begin_repair(Services& s, Request& r, const ReplyFn& reply) {
  auto answer = s.requests.begin_repair(r.session, r.body);
  answer["holders"] = s.pauses.repair_began(r.session, protocol::get_name(r.body, "name", "begin_repair"));
  reply(std::move(answer));
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

// Work over a whole copy (a repair's digests, its server-to-server pull):
// on the worker pool, so that a large one does not hold up other clients'
// control requests.
template <Body (*work)(Services&, const Body&)>
void on_workers(Services& s, Request& r, const ReplyFn& reply) {
  boost::asio::post(s.workers, [&s, body = std::move(r.body), reply, type = r.type] {
    auto answer = replying(type, [&] { return work(s, body); });
    boost::asio::post(s.io, [answer = std::move(answer), reply, type] { guarded(type, reply, [&] { reply(answer); }); });
  });
}

Body digests_of(Services& s, const Body& body) { return s.requests.segment_digest(body); }
Body pulled(Services& s, const Body& body) { return s.puller.pull(body); }
// The host's checks open RDMA devices and UCX: not on the io thread.
Body diagnosed(Services& s, const Body& body) { return s.requests.diagnose(body); }

// A copy pulled from another smbd with a client's ticket: the fabric's
// secret only (a repair is the operator's), no job's credential.
void pull_copy(Services& s, Request& r, const ReplyFn& reply) {
  if (!r.scope.empty())
    throw Error(Errc::permission_denied, "pull_copy: a job's credential (names starting " + util::quoted(r.scope) +
                                             ") cannot have servers copy between them: use the fabric's secret");
  on_workers<pulled>(s, r, reply);
}

// A repair's read of its source's version, answered between ops as
// version_call's settled read is: where an op is being applied, once it
// ends, so that the version never names bytes that are half way through an
// op (the copy that takes it gets that op's bytes, or none of them).
void get_version(Services& s, Request& r, const ReplyFn& reply) {
  const auto name = protocol::get_segment_name(r.body, "name", "get_version");
  const auto settled = s.requests.settled_version(name);
  if (settled.now == settled.after_running) return reply(protocol::ok_reply({{"version", settled.now}}));
  s.versions.wait(r.session, name, settled.after_running, std::chrono::minutes(1),
                  [reply](protocol::FixedReply answer) {
                    reply(answer.code == Errc::ok ? protocol::ok_reply({{"version", answer.version}})
                                                  : protocol::error_reply(answer.code, answer.message));
                  });
}

// A repaired copy's version: version waits on it may have been reached.
void set_version(Services& s, Request& r, const ReplyFn& reply) {
  const auto name = protocol::get_segment_name(r.body, "name", "set_version");
  reply(s.requests.set_version(r.session, r.body));
  s.versions.advanced(name);
}

// A server's replacement changes where every client of the fabric goes:
// the fabric's secret only, no job's credential.
void replace_server(Services& s, Request& r, const ReplyFn& reply) {
  if (!r.scope.empty())
    throw Error(Errc::permission_denied, "replace_server: a job's credential (names starting " +
                                             util::quoted(r.scope) + ") cannot replace servers: use the fabric's secret");
  reply(s.requests.replace_server(r.session, r.body));
}

// One entry per message of protocol/message_schema.hpp, in its order (the
// static_asserts below say which is missing or out of place).
constexpr std::array kRoutes{
    Route{MessageType::hello, at_once<&RequestHandler::hello>},
    Route{MessageType::reserve_name, at_once<&RequestHandler::reserve_name>},
    Route{MessageType::commit_layout, at_once<&RequestHandler::commit_layout>},
    Route{MessageType::get_layout, at_once<&RequestHandler::get_layout>},
    Route{MessageType::alloc_segment, at_once<&RequestHandler::alloc_segment>},
    Route{MessageType::open_segment, at_once<&RequestHandler::open_segment>},
    Route{MessageType::close_segment, at_once<&RequestHandler::close_segment>},
    Route{MessageType::destroy, at_once<&RequestHandler::destroy>},
    Route{MessageType::stat, stat},
    Route{MessageType::list_layouts, list_layouts},
    Route{MessageType::abandon_name, at_once<&RequestHandler::abandon_name>},
    Route{MessageType::get_version, get_version},  // a repair's (clients call version_call)
    Route{MessageType::lock, deferred<&Coordination::lock>},
    Route{MessageType::unlock, deferred<&Coordination::unlock>},
    Route::for_call(MessageType::vector_call),
    Route::for_call(MessageType::version_call),
    Route::for_call(MessageType::barrier_call),
    // Only a session's answer to its hello's challenge (control_session.cpp).
    Route{MessageType::auth, auth_out_of_turn},
    Route{MessageType::begin_repair, begin_repair},
    Route{MessageType::end_repair, end_repair},
    Route{MessageType::hold_layout, pauses_at_once<&RepairPauses::hold>},
    Route{MessageType::set_version, set_version},
    Route{MessageType::release_layout, pauses_at_once<&RepairPauses::release>},
    Route{MessageType::watch_repairs, pauses_deferred<&RepairPauses::watch>},
    Route{MessageType::ack_pause, pauses_deferred<&RepairPauses::ack>},
    Route{MessageType::pause_holders, pauses_deferred<&RepairPauses::pause>},
    Route{MessageType::segment_digest, on_workers<digests_of>},
    Route{MessageType::mark_stale, mark_stale},
    Route::for_call(MessageType::atomic_call),
    Route{MessageType::segment_clients, at_once<&RequestHandler::segment_clients>},
    Route{MessageType::server_map, at_once<&RequestHandler::server_map>},
    Route{MessageType::replace_server, replace_server},
    Route{MessageType::pull_copy, pull_copy},
    Route{MessageType::diagnose, on_workers<diagnosed>},
};

static_assert(kRoutes.size() == protocol::kMessages.size(), "kRoutes: one entry per message of the schema");

consteval bool routes_follow_the_schema() {
  for (std::size_t i = 0; i < kRoutes.size(); ++i) {
    const auto& message = protocol::kMessages[i];
    if (static_cast<std::uint16_t>(kRoutes[i].type) != message.number) return false;
    // A call's route says so (data_path_calls.cpp serves it); a control
    // message's has its handler (checked by tests/unit/message_routes_test.cpp:
    // a function pointer is no constant expression in every build).
    if ((message.path == protocol::Path::call) != kRoutes[i].call) return false;
  }
  return true;
}
static_assert(routes_follow_the_schema(),
              "kRoutes: the schema's messages in its order, a call's route made by Route::for_call");

}  // namespace

const Route& route_for(std::uint16_t type, Arrival path) {
  const protocol::MessageInfo* message = protocol::message_info(type);
  if (message == nullptr) throw Error(Errc::protocol, "unknown control message type " + std::to_string(type));
  const bool as_call = message->path == protocol::Path::call;
  if (as_call != (path == kCall))
    throw Error(Errc::protocol, std::string(message->name) +
                                    (path == kCall ? " is not served over the data path (use the control connection)"
                                                   : " is served only over the data path"));
  return kRoutes[static_cast<std::size_t>(message - protocol::kMessages.data())];
}

}  // namespace smb::server
