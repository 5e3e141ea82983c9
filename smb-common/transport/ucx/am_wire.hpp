#pragma once
// Active-message headers of the UCX "am" data protocol, the path used where
// UCX only emulates RMA in software (TCP). Hot path: fixed-size PODs, checked
// for size on receipt and for bounds against the segment before use.
#include <cstdint>

namespace smb::transport::ucx {

enum AmId : unsigned {
  kAmWrite = 1,  // client -> server: header + data to store
  kAmRead = 2,   // client -> server: header, asks for data
  kAmReply = 3,  // server -> client: reply header (+ data for reads)
};

struct AmRequestHeader {
  std::uint64_t token;       // client's id for the op, echoed in the reply
  std::uint64_t segment_id;
  std::uint64_t offset;      // inside the segment
  std::uint64_t length;
};

struct AmReplyHeader {
  std::uint64_t token;
  std::int32_t status;       // smb::Errc
  std::uint32_t reserved;
  std::uint64_t length;      // data bytes that follow (reads)
};

}  // namespace smb::transport::ucx
