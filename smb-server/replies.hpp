#pragma once
// How smbd turns any failure of a request into an error reply. Every entry
// point (control sessions, data-path calls, the worker pool, coordination)
// runs its request under one of these, so nothing a client sends can let an
// exception escape into a thread and end the daemon.
#include "protocol/fixed_calls.hpp"
#include "protocol/messages.hpp"

#include <functional>

namespace smb::server {

// Sends the reply to one request (exactly once).
using ReplyFn = std::function<void(protocol::Body)>;

// `reply`, made to answer at most once: a failure after a reply was sent
// cannot send a second one.
ReplyFn reply_once(ReplyFn reply);

// The exception being handled, as a code and a text: call only inside a
// catch block. Our own errors keep their code; anything else becomes
// `internal` and is logged, naming the request type.
struct ErrorText {
  Errc code = Errc::internal;
  std::string message;
};
ErrorText current_error(std::uint16_t type) noexcept;
// The same as an error reply body.
protocol::Body current_error_reply(std::uint16_t type) noexcept;

// Requests whose answer is a buffer's version (vector ops, version reads and
// waits, barriers) come as calls and answer with a FixedReply (fixed_calls.hpp).
using VersionReplyFn = std::function<void(protocol::FixedReply)>;

// f() returns the reply; a failure becomes an error reply.
template <class F>
protocol::Body replying(std::uint16_t type, F&& f) noexcept {
  try {
    return f();
  } catch (...) {
    return current_error_reply(type);
  }
}

// f() answers through `reply` itself; a failure is answered as an error.
template <class F>
void guarded(std::uint16_t type, const ReplyFn& reply, F&& f) noexcept {
  try {
    f();
  } catch (...) {
    reply(current_error_reply(type));
  }
}

}  // namespace smb::server
