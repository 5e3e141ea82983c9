#pragma once
// Online repair's meeting point, on a replicated buffer's home server
// (docs/reliability.md, "Repair"). One-sided writes never reach smbd's CPU,
// so smbd cannot fence them itself: it knows which clients hold the buffer
// open ("holders": a session's hold_layout), and for the final copy of a
// repair it asks each of them to stop writing it and to say when their
// writes in flight have landed. The repair copies while clients write, then
// pauses them only to recopy what changed meanwhile (smb-client/repair.cpp).
//
//   holder's open      hold_layout {name}          -> layout (held), or "repairing" while paused
//   holder's watcher   watch_repairs {holder}      -> {name, epoch} once a pause asks it, {} on timeout,
//                                                     {stop} at once for a holder of another client
//                                                     (ClientIdentities: sessions are numbered anew
//                                                     after a restart),
//                                                     {stop} once the holder holds nothing,
//                                                     {stale: name, layout} once a copy of it was
//                                                     recorded stale (mark_stale), so that every holder
//                                                     leaves it, not only the client that found it
//   holder's watcher   ack_pause {holder, name, epoch} -> layout, once the pause ends
//   repairer           begin_repair (request_handler) -> {layout, holders}: how many hold it now
//   repairer           pause_holders {name, timeout_ms} -> {holders, clients, untouched} once every holder acked
//                                                     (clients: the holders' identities, so that the repairer
//                                                     can check that everyone with a copy open is among them;
//                                                     untouched: nobody held it here since begin_repair, so
//                                                     nobody can have written it: the copy needs no digest pass)
//   repairer           end_repair (request_handler)    -> resumes: every ack is answered
//
// A holder's watcher runs on a connection of its own (the holder's main one
// makes the calls that hold and release), so holders are named by the
// session of that main connection. A session that closes stops holding; a
// repairer whose session closes resumes its holders unrepaired; a pause that
// not every holder answers in time fails (busy) and resumes them.
//
// Everything here runs on the control server's io thread, like Coordination.
#include "client_identities.hpp"
#include "protocol/messages.hpp"
#include "registry.hpp"
#include "replies.hpp"

#include <boost/asio.hpp>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace smb::server {

class RepairPauses {
 public:
  RepairPauses(boost::asio::io_context& io, Registry& registry, const ClientIdentities& identities)
      : io_(io), registry_(registry), identities_(identities) {}

  using Body = protocol::Body;
  Body hold(SessionId session, const Body& request);
  Body release(SessionId session, const Body& request);
  void watch(SessionId session, const Body& request, const ReplyFn& reply);
  void ack(SessionId session, const Body& request, const ReplyFn& reply);
  void pause(SessionId session, const Body& request, const ReplyFn& reply);
  // A repair of `name` began here (begin_repair): returns how many hold it,
  // and from now on notes whether anyone holds it before the pause.
  std::size_t repair_began(SessionId repairer, const std::string& name);
  // The repair of `name` ended (end_repair): its holders go on, with the layout as it is now.
  void resume(const std::string& name);
  // A copy of `name` was recorded stale: its holders' watchers are told.
  void stale_marked(const std::string& name);
  void session_closed(SessionId session);

 private:
  using TimerPtr = std::shared_ptr<boost::asio::steady_timer>;
  struct Watch {
    SessionId watcher = 0;  // the connection waiting
    ReplyFn reply;
    TimerPtr timer;
  };
  struct Pause {
    std::uint64_t epoch = 0;
    SessionId repairer = 0;
    std::set<SessionId> acked;
    ReplyFn answer_repairer;  // until every holder acked (then empty)
    TimerPtr timer;
    std::vector<std::pair<SessionId, ReplyFn>> acks;  // (watcher, reply): answered at resume
  };
  struct Repair {
    SessionId repairer = 0;
    bool untouched = true;  // nobody held the buffer since begin_repair
  };
  struct Buffer {
    std::map<SessionId, std::uint32_t> holders;  // session -> opens
    std::optional<Pause> pause;
    std::optional<Repair> repair;  // from begin_repair to end_repair (resume) or the repairer's end
  };

  Body layout_reply(const std::string& name) const;
  void ask(SessionId holder, const std::string& name, std::uint64_t epoch);
  void answer_watch(SessionId holder, Body body);
  // Answers the holder's watch with one buffer of its news, if it has both.
  void tell_news(SessionId holder);
  void complete_if_acked(const std::string& name);
  void drop_holder(const std::string& name, SessionId holder);
  // Ends a pause: acks are answered with the layout; a repairer still
  // waiting gets `failure` (or, empty, nothing: it went).
  void end_pause(const std::string& name, const std::optional<std::string>& failure);
  // Forgets `name` once nothing is left of it: no holder, pause or repair.
  void forget_if_idle(std::map<std::string, Buffer>::iterator it);

  boost::asio::io_context& io_;
  Registry& registry_;
  const ClientIdentities& identities_;
  std::map<std::string, Buffer> buffers_;
  std::map<SessionId, std::set<std::string>> held_by_;
  std::map<SessionId, Watch> watches_;  // by holder
  std::map<SessionId, std::set<std::string>> news_;  // by holder: buffers with copies newly stale
  std::uint64_t next_epoch_ = 1;
};

}  // namespace smb::server
