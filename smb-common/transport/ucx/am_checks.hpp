#pragma once
// The UCX "am" requests (am_wire.hpp) as the server's shared checks and
// atomics (transport/server_ops.hpp) take them: headers read at exactly
// their size, then translated, so that the transport's handlers and the
// fuzzer (tests/fuzz) run the same code.
#include "transport/server_ops.hpp"
#include "transport/ucx/am_wire.hpp"

#include <cstring>
#include <optional>

namespace smb::transport::ucx {

// A header of exactly sizeof(Header) bytes, copied out; else nullopt.
template <class Header>
std::optional<Header> read_header(const void* bytes, std::size_t length) {
  if (bytes == nullptr || length != sizeof(Header)) return std::nullopt;
  Header h;
  std::memcpy(&h, bytes, sizeof h);
  return h;
}

inline Errc check_request(const SegmentResolver& resolver, std::string_view scope, const AmRequestHeader& h,
                          SegmentAccess& access) {
  return check_range(resolver, scope, h.segment_id, h.offset, h.length, access);
}

inline AtomicRequest atomic_request(const AmAtomicHeader& h) {
  return AtomicRequest{h.segment_id, h.offset, h.op, h.operand, h.compare};
}

}  // namespace smb::transport::ucx
