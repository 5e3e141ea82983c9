#pragma once
// Active-message headers of the UCX "am" data protocol, the path used where
// UCX only emulates RMA in software (TCP), for atomics where a path has no
// atomic lane, and for calls (requests the server acts on). Hot path: fixed-size PODs, checked for size on receipt and for
// bounds against the segment before use.
#include "transport/call_wire.hpp"
#include "transport/server_ops.hpp"

#include <cstdint>

namespace smb::transport::ucx {

enum AmId : unsigned {
  kAmWrite = 1,   // client -> server: AmRequestHeader + data to store
  kAmRead = 2,    // client -> server: AmRequestHeader, asks for data
  kAmReply = 3,   // server -> client: AmReplyHeader (+ data for reads and atomics)
  kAmAtomic = 4,  // client -> server: AmAtomicHeader; the reply carries the old value
  kAmCall = 5,    // client -> server: CallHeader (call_wire.hpp), data frame + payload; the reply carries a frame
  kAmPing = 6,    // client -> server: AmPingHeader; an empty reply (wires up the server's way back, see UcxChannel)
};

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
