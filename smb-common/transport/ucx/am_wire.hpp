#pragma once
// Active-message headers of the UCX "am" data protocol, the path used where
// UCX only emulates RMA in software (TCP), for atomics where a path has no
// atomic lane, and for calls (requests the server acts on). Hot path: fixed-size PODs, checked for size on receipt and for
// bounds against the segment before use.
#include "transport/call_wire.hpp"
#include "transport/server_ops.hpp"

#include <cstddef>
#include <cstdint>

namespace smb::transport::ucx {

enum AmId : unsigned {
  kAmWrite = 1,   // client -> server: AmRequestHeader + data to store
  kAmRead = 2,    // client -> server: AmRequestHeader, asks for data
  kAmReply = 3,   // server -> client: AmReplyHeader (+ data for reads and atomics)
  kAmAtomic = 4,  // client -> server: AmAtomicHeader; the reply carries the old value
  kAmCall = 5,    // client -> server: CallHeader (call_wire.hpp), data frame + payload; the reply carries a frame
  kAmPing = 6,    // client -> server: AmPingHeader; an empty reply (wires up the server's way back, see UcxChannel)
  kAmReadBulk = 7,  // as kAmRead, and the reply's data comes by rendezvous
};

// Every active message names its protocol (UCP_AM_SEND_FLAG_EAGER or _RNDV),
// whatever UCX_RNDV_THRESH says. Eager: headers, atomics, small calls and
// data (the receiver gets it in UCX's buffer and copies it once).
// Rendezvous, from kBulkFrom bytes on: bulk data over TCP, a write's payload
// or a kAmReadBulk reply, which the receiver has UCX move straight into the
// segment, or into the reader's memory, without a copy through a bounce
// buffer on either side (reads over TCP 0.6 -> 1.0 of ucp_am_bw); and a
// call's payload on any lane (a vector op's x). A rendezvous call carries
// CallHeader and its frame (up to kLongHeaderFrame bytes) as the message's
// header and the payload alone as its data, which smbd receives straight
// into the call's payload: over shared memory one kernel copy (CMA), where
// eager fragments cost three and a scattered receive UCX's fragments.
inline constexpr std::size_t kBulkFrom = 256 * 1024;
inline constexpr std::size_t kLongHeaderFrame = 1024;

struct AmPingHeader {
  std::uint64_t token;
};

struct AmRequestHeader {
  std::uint64_t token;       // client's id for the op, echoed in the reply
  std::uint64_t segment_id;
  std::uint64_t offset;      // inside the segment
  std::uint64_t length;
};

struct AmAtomicHeader {
  std::uint64_t token;
  std::uint64_t segment_id;
  std::uint64_t offset;      // 8-byte aligned, inside the segment
  std::uint32_t op;          // transport::AtomicOp
  std::uint32_t reserved;
  std::uint64_t operand;     // value to add, or the desired value
  std::uint64_t compare;     // compare_swap: the expected value
};

struct AmReplyHeader {
  std::uint64_t token;
  std::int32_t status;       // smb::Errc
  std::uint32_t reserved;
  std::uint64_t length;      // data bytes that follow (reads, atomics)
};

}  // namespace smb::transport::ucx
