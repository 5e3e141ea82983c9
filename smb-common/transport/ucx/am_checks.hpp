#pragma once
// What the server checks of an "am" request (am_wire.hpp) before touching
// memory, and the server-side atomics: pure functions of the header and the
// segment table, so that the transport's handlers and the fuzzer
// (tests/fuzz) run the same code.
#include "transport/transport.hpp"
#include "transport/ucx/am_wire.hpp"

#include <smb/error.hpp>

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

// A read or write: the segment exists and [offset, offset+length) lies in it.
// On success `access` holds the segment (kept alive while used).
Errc check_request(const SegmentResolver& resolver, const AmRequestHeader& h, SegmentAccess& access);
// An atomic: also an 8-byte aligned word and a known op.
Errc check_atomic(const SegmentResolver& resolver, const AmAtomicHeader& h, SegmentAccess& access);
// Runs an atomic that check_atomic accepted; returns the word's old value.
// The CPU's atomics are coherent with UCX's shared-memory atomics (also the
// CPU's), not with a NIC's: one buffer should not mix the two.
std::uint64_t apply_atomic(const AmAtomicHeader& h, const SegmentAccess& access);

}  // namespace smb::transport::ucx
