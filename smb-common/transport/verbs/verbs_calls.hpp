#pragma once
// Calls (transport.hpp, call_wire.hpp, reply_queue.hpp) over verbs: two-sided SEND/RECV on
// the RC QP that also carries the one-sided ops. A call is one SEND of
// CallHeader, frame, payload; its reply one SEND of CallHeader, frame. The
// server keeps kCallCredits receives posted per connection and reposts each
// before it answers, so a client with at most kCallCredits calls unanswered
// never sends into a queue with no receive posted.
#include "transport/call_wire.hpp"
#include "transport/reply_queue.hpp"

#include <cstddef>
#include <cstdint>

namespace smb::transport::verbs {

inline constexpr std::size_t kCallMessage = 128 * 1024;  // a call's SEND, header included
inline constexpr std::size_t kReplyMessage = 8 * 1024;   // a reply's SEND, header included
// Room a call leaves for its frame (a vector op's fields; x goes in the payload).
inline constexpr std::size_t kCallFrameRoom = 4 * 1024;
// The session's ticket (channel_admission.hpp) travels as the connect
// request's private data; a server that does not admit it rejects the
// connection with this private data, so the client can say why.
inline constexpr char kNotAdmitted[] = "smb: ticket not admitted";

}  // namespace smb::transport::verbs
