#pragma once
// Where a vector op (a data-path vector_call or atomic_call) runs: where it arrived when it is
// small and nobody else holds the buffer -- a few microseconds of memory
// time, less than a hand-off to another thread costs -- else on the worker
// pool, which may wait for the buffer. Then the buffer's version waiters
// are woken, from the thread that ran the op.
#include "message_routes.hpp"

#include <chrono>
#include <functional>

namespace smb::server {

// Vector ops of at most this many bytes of x run where they arrive.
inline constexpr std::uint64_t kInlineVectorBytes = 64 * 1024;

// How long a replica's ordered op (VectorRequest::order) waits for the op
// before it. The client of that op may have died between the primary and
// this replica: then this replica stays behind, the op fails with
// Errc::timeout so that its client records the replica as stale, and later
// ordered ops on it are refused at once (Segment::behind; reliability.md).
inline constexpr std::chrono::milliseconds kReplicaGapTimeout{5000};

// `done` is called exactly once, on the thread that ran the op, with the
// answer. `type` names the request in logs of unexpected failures.
using VectorDone = VersionReplyFn;
void run_vector_op(Services& services, std::uint16_t type, VectorRequest request, VectorDone done);

}  // namespace smb::server
