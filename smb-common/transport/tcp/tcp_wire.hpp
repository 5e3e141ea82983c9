#pragma once
// The tcp transport's byte stream (one TCP connection per client channel).
//
//   client -> server   Hello, then the ticket (ticket_length bytes)
//   server -> client   HelloReply: ok, or permission_denied
//   client -> server   requests: RequestHeader, then by kind
//                        put:  `length` bytes to store
//                        call: `frame_length` bytes of frame, `length` of payload
//                        get, atomic: nothing
//   server -> client   replies, in any order: ReplyHeader, then `length`
//                      bytes (a get's data, an atomic's old word, a call's
//                      reply frame)
//
// Fixed-size little-endian PODs (both ends are x86-64 or aarch64, as for
// the other transports' wire structs). Every field a client sends is
// checked by the server (tcp_server.cpp) before it touches memory, and
// every reply field by the client before it writes the caller's memory.
#include "transport/server_ops.hpp"

#include <cstddef>
#include <cstdint>

namespace smb::transport::tcp {

inline constexpr std::uint32_t kMagic = 0x54424d53;  // "SMBT"
inline constexpr std::uint32_t kVersion = 1;

// Bounds on what a peer may announce.
inline constexpr std::size_t kMaxTicket = 256;
inline constexpr std::size_t kMaxCallFrame = 64 * 1024;      // a call's frame (its fixed fields)
inline constexpr std::size_t kMaxCallPayload = 4u << 20;     // a call's payload (a vector op's x)
inline constexpr std::size_t kMaxReplyFrame = 1u << 20;      // a call's reply frame

enum class Kind : std::uint32_t { put = 1, get = 2, atomic = 3, call = 4 };

struct Hello {
  std::uint32_t magic = kMagic;
  std::uint32_t version = kVersion;
  std::uint32_t ticket_length = 0;
  std::uint32_t reserved = 0;
};

struct HelloReply {
  std::uint32_t magic = kMagic;
  std::int32_t status = 0;  // smb::Errc
};

struct RequestHeader {
  std::uint32_t kind = 0;          // Kind
  std::uint32_t atomic_op = 0;     // atomic: transport::AtomicOp
  std::uint64_t token = 0;         // the client's id for the op, echoed in the reply
  std::uint64_t segment_id = 0;    // put, get, atomic
  std::uint64_t offset = 0;        // put, get, atomic: inside the segment
  std::uint64_t length = 0;        // put: bytes that follow; get: bytes asked; call: payload bytes
  std::uint64_t operand = 0;       // atomic: the value to add, or the desired value
  std::uint64_t compare = 0;       // atomic compare_swap: the expected value
  std::uint32_t frame_length = 0;  // call: frame bytes that follow the header
  std::uint32_t reserved = 0;
};
static_assert(sizeof(RequestHeader) == 64);

struct ReplyHeader {
  std::uint64_t token = 0;
  std::int32_t status = 0;  // smb::Errc
  std::uint32_t reserved = 0;
  std::uint64_t length = 0;  // bytes that follow
};
static_assert(sizeof(ReplyHeader) == 24);

// The server's address as clients get it: the port it listens on (the host
// is the one the client reached the control port at, as for verbs).
struct WireAddress {
  char magic[4] = {'t', 'c', 'p', '1'};
  std::uint16_t port = 0;
  std::uint16_t reserved = 0;
};

// What the server does with one request, decided from its header alone
// (the same function the fuzzer runs): serve it, or refuse it with `error`
// and either drain `drain` bytes that follow it or, where the stream can no
// longer be trusted, close the connection.
struct RequestCheck {
  Errc error = Errc::ok;
  std::uint64_t drain = 0;  // bytes following the header to read and drop
  bool close = false;
};
RequestCheck check_request(const SegmentResolver& resolver, std::string_view scope, const RequestHeader& h,
                           SegmentAccess& access);

// An atomic request's fields as the shared server ops take them.
inline AtomicRequest atomic_request(const RequestHeader& h) {
  return AtomicRequest{h.segment_id, h.offset, h.atomic_op, h.operand, h.compare};
}

}  // namespace smb::transport::tcp
