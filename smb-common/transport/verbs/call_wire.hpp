#pragma once
// Calls (transport.hpp) over verbs: two-sided SEND/RECV on the RC QP that
// also carries the one-sided ops. A call is one SEND of CallHeader, frame,
// payload; its reply one SEND of CallHeader, frame. The server keeps
// kCallCredits receives posted per connection and reposts each before it
// answers, so a client with at most kCallCredits calls unanswered never
// sends into a queue with no receive posted.
#include <cstddef>
#include <cstdint>

namespace smb::transport::verbs {

inline constexpr std::size_t kCallMessage = 128 * 1024;  // a call's SEND, header included
inline constexpr std::size_t kReplyMessage = 8 * 1024;   // a reply's SEND, header included
inline constexpr std::uint32_t kCallCredits = 16;
// Room a call leaves for its frame (a vector op's fields; x goes in the payload).
inline constexpr std::size_t kCallFrameRoom = 4 * 1024;

struct CallHeader {
  std::uint64_t token;         // the client's id for the call, echoed in the reply
  std::uint32_t frame_length;  // the frame's bytes; the payload is what follows it
  std::uint32_t reserved;
};

}  // namespace smb::transport::verbs
