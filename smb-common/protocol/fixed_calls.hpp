#pragma once
// The hot calls of training -- a vector op (every accumulate of a gradient),
// a version read or wait (every notify) and a barrier -- as data-path calls with fixed
// binary bodies that both sides read and write without MessagePack, maps or
// allocations beyond the names, as low-latency RPC systems (eRPC, FaRM) do.
// Everything else is a control message with a MessagePack body
// (messages.hpp); message_schema.hpp says which is which.
//
// The bodies' fixed parts are POD structs (fixed_call_bodies.hpp); the
// names follow them, and a vector op's x is the call's payload.
//
// Names are segment names (messages.hpp: a buffer's name, or a replica's).
// A vector or atomic call's order is 0, or the version the op must bring the
// segment to: a replica applies it only right after the op before it in that
// order (docs/reliability.md, "Replication"). Atomics come as calls only on
// replicated buffers, where they must take their place in that order like
// vector ops; unreplicated buffers use the transport's one-sided atomics.
//
// Little endian, after the usual 16-byte frame header; a vector op's x
// travels as the call's raw payload. Decoding checks every length and range
// and throws Error(protocol) or Error(invalid_argument) naming the field.
#include "protocol/fixed_call_bodies.hpp"
#include "protocol/messages.hpp"

#include <smb/error.hpp>
#include <smb/vector_ops.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace smb::protocol {

inline constexpr std::size_t kVectorCallFixedSize = sizeof(VectorCallBody);
inline constexpr std::size_t kVersionCallFixedSize = sizeof(VersionCallBody);
inline constexpr std::size_t kBarrierCallFixedSize = sizeof(BarrierCallBody);
inline constexpr std::size_t kAtomicCallFixedSize = sizeof(AtomicCallBody);
inline constexpr std::size_t kFixedReplySize = sizeof(FixedReplyBody);  // an atomic_call's: AtomicReplyBody

struct VectorCall {
  VectorOp op = VectorOp::accumulate;
  DType type = DType::f32;
  std::uint64_t offset = 0;  // bytes into the server's segment
  std::uint64_t count = 0;   // elements
  double alpha = 1.0;
  std::string name;
  std::optional<std::string> source;  // x in another buffer's segment here, else in the payload
  std::uint64_t source_offset = 0;
  std::uint64_t order = 0;  // 0: apply in arrival order; else the version this op brings the segment to
};

// The whole frame (header included).
Bytes encode_vector_call(std::uint32_t request_id, VectorOp op, DType type, std::uint64_t offset, std::uint64_t count,
                         double alpha, std::string_view name, std::optional<std::string_view> source = std::nullopt,
                         std::uint64_t source_offset = 0, std::uint64_t order = 0);
// The body after the frame header.
VectorCall decode_vector_call(std::span<const std::uint8_t> body);

enum class VersionCallKind : std::uint8_t { get = 1, wait = 2 };

struct VersionCall {
  VersionCallKind kind = VersionCallKind::get;
  std::string name;
  std::uint64_t version = 0;     // wait: until the buffer's version here reaches it
  std::uint64_t timeout_ms = 0;  // wait: then fail with Errc::timeout
};

Bytes encode_version_call(std::uint32_t request_id, VersionCallKind kind, std::string_view name,
                          std::uint64_t version = 0, std::uint64_t timeout_ms = 0);
VersionCall decode_version_call(std::span<const std::uint8_t> body);

struct BarrierCall {
  std::string name;
  std::uint64_t parties = 0;
  std::uint64_t timeout_ms = 0;
  std::uint64_t session = 0;  // the client's control session here (hello's reply), whose close breaks the barrier
};

Bytes encode_barrier_call(std::uint32_t request_id, std::string_view name, std::uint64_t parties,
                          std::uint64_t timeout_ms, std::uint64_t session);
BarrierCall decode_barrier_call(std::span<const std::uint8_t> body);

enum class AtomicKind : std::uint8_t { fetch_add = 1, compare_swap = 2 };

// An atomic on the 8-byte word at `offset` of one copy of a replicated buffer.
struct AtomicCall {
  AtomicKind kind = AtomicKind::fetch_add;
  std::string name;
  std::uint64_t offset = 0;   // bytes into the server's segment, a multiple of 8
  std::uint64_t operand = 0;  // fetch_add: the addend; compare_swap: the expected value
  std::uint64_t desired = 0;  // compare_swap: the value stored where the word equals `operand`
  std::uint64_t order = 0;    // as a vector call's
};

Bytes encode_atomic_call(std::uint32_t request_id, AtomicKind kind, std::string_view name, std::uint64_t offset,
                         std::uint64_t operand, std::uint64_t desired = 0, std::uint64_t order = 0);
AtomicCall decode_atomic_call(std::span<const std::uint8_t> body);

// The reply to any of the calls.
struct FixedReply {
  Errc code = Errc::ok;
  std::uint64_t version = 0;  // the buffer's version here after the op, or the one reached
  std::string message;        // why it failed
  std::uint64_t old = 0;      // atomic_call: the word before the op
};

// The whole reply frame to a call of `type`; a message longer than
// kMaxErrorLength is cut.
Bytes encode_fixed_reply(MessageType type, std::uint32_t request_id, const FixedReply& reply);
// A whole reply frame: checks the header (a reply to `type`) and the body.
FixedReply decode_fixed_reply(MessageType type, std::span<const std::uint8_t> frame);

}  // namespace smb::protocol
