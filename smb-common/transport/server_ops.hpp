#pragma once
// What a server does for a transport that asks it to (server-assisted
// ops): the checks before memory is touched, and the atomics done by the
// server's CPU. Shared by every transport (UCX's "am" protocol uses them
// today; any transport without native atomics does the same), and pure
// functions of the request and the segment table, so that the fuzzer
// (tests/fuzz) runs the very code the daemon runs.
#include "transport/transport.hpp"

#include <smb/error.hpp>

#include <cstdint>

namespace smb::transport {

enum class AtomicOp : std::uint32_t { fetch_add = 1, compare_swap = 2 };

struct AtomicRequest {
  std::uint64_t segment_id = 0;
  std::uint64_t offset = 0;   // 8-byte aligned, inside the segment
  std::uint32_t op = 0;       // AtomicOp, as it came off the wire
  std::uint64_t operand = 0;  // value to add, or the desired value
  std::uint64_t compare = 0;  // compare_swap: the expected value
};

// A read or write of [offset, offset+length) in a segment: the segment exists
// within the channel's `scope` (its session's credential prefix: see
// SegmentResolver) and the range lies in it. On success `access` holds the
// segment (kept alive while used).
Errc check_range(const SegmentResolver& resolver, std::string_view scope, std::uint64_t segment_id,
                 std::uint64_t offset, std::uint64_t length, SegmentAccess& access);
// An atomic: also an 8-byte aligned word and a known op.
Errc check_atomic(const SegmentResolver& resolver, std::string_view scope, const AtomicRequest& request,
                  SegmentAccess& access);
// Runs an atomic that check_atomic accepted; returns the word's old value.
// The CPU's atomics are coherent with shared-memory atomics (also the CPU's),
// not with a NIC's: one buffer should not mix the two (docs/architecture.md).
std::uint64_t apply_atomic(const AtomicRequest& request, const SegmentAccess& access);

}  // namespace smb::transport
