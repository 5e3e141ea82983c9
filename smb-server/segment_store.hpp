#pragma once
// The segment store: the segments of every buffer striped onto this smbd
// (a buffer's share, or a copy's: "NAME#rK"), their memory, the handles
// clients hold on them and the vector ops applied to them. Every handle a
// client opens is tracked per session, so a client that disconnects
// releases them. Its own mutex, taken alone (registry.hpp says the order);
// ordered ops pass the replica-order gate (replica_order.hpp).
//
// A destroyed buffer's name is free at once; its memory returns to the pool
// when the last handle on it closes (as with unlink), so a client still
// holding the old remote key never writes into another buffer's memory.
#include "limits.hpp"
#include "listing_pages.hpp"
#include "memory_pool.hpp"
#include "protocol/fixed_calls.hpp"
#include "replica_order.hpp"
#include "segment_allocator.hpp"
#include "transport/transport.hpp"

#include <smb/client.hpp>
#include <smb/vector_ops.hpp>

#include <atomic>
#include <optional>
#include <vector>

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace smb::server {

using SessionId = std::uint64_t;
// Data-path calls have no session; control sessions count from 1.
inline constexpr SessionId kCallSession = 0;

struct Segment {
  std::string name;
  std::uint64_t id = 0;
  std::uint64_t pool_offset = 0;
  std::uint64_t reserved = 0;  // bytes taken from the allocator
  std::uint64_t length = 0;    // bytes the buffer uses
  std::byte* base = nullptr;
  std::unique_ptr<transport::Registration> registration;
  std::uint32_t open_handles = 0;
  std::uint64_t opens = 0;  // handles ever given out (SegmentStore::segment_users)
  bool unlinked = false;
  SegmentAllocator* allocator = nullptr;
  std::mutex op_mutex;                    // server-side vector ops apply one at a time
  std::atomic<std::uint64_t> version{0};  // advanced by every applied vector op
  // Vector ops begun (under op_mutex, before they touch memory): above
  // `version` while one is being applied, so a reader can tell a segment in
  // the middle of an op from one between ops (SegmentStore::settled_version).
  std::atomic<std::uint64_t> begun{0};
  // A copy whose ordered op waited in vain for the op before it (its
  // client died between the copies): it no longer follows its primary, so
  // later ordered ops are refused at once instead of each waiting (until a
  // repair gives it its source's version: set_version).
  std::atomic<bool> behind{false};
  ~Segment();
};

// A server-side vector op on this server's piece of a buffer, validated by
// SegmentStore::apply before it touches memory.
struct VectorRequest {
  std::string name;
  VectorOp op = VectorOp::accumulate;
  DType type = DType::f32;
  std::uint64_t offset = 0;  // bytes into the segment
  std::uint64_t count = 0;   // elements
  double alpha = 1.0;
  std::vector<std::uint8_t> data;     // x sent with the request, or
  std::optional<std::string> source;  // x in this server's segment of another buffer
  std::uint64_t source_offset = 0;
  // 0, or the version this op brings the segment to: a replica's copy of an
  // op its primary applied, which must follow the op before it (replication).
  std::uint64_t order = 0;
  // Instead of op, type, count and x: an atomic on the 8-byte word at
  // `offset` (a replicated buffer's atomics take their place in the same
  // order as its vector ops: protocol/fixed_calls.hpp).
  struct Atomic {
    protocol::AtomicKind kind = protocol::AtomicKind::fetch_add;
    std::uint64_t operand = 0;  // the addend, or the expected value
    std::uint64_t desired = 0;  // compare_swap
  };
  std::optional<Atomic> atomic;
};

// What SegmentStore::apply did: the segment's new version, and an atomic's old word.
struct Applied {
  std::uint64_t version = 0;
  std::uint64_t old = 0;
};

struct ServerStats {
  std::uint64_t capacity = 0;
  std::uint64_t used = 0;
  std::uint64_t largest_free = 0;
  bool huge_pages = false;
  std::uint64_t populated = 0;     // of capacity, faulted in (PoolPopulator)
  std::uint64_t buffer_count = 0;  // segments held here
};

class SegmentStore {
 public:
  SegmentStore(MemoryPool& pool, transport::ServerTransport& transport, const SessionQuotas& quotas = {});
  MemoryPool& pool() { return pool_; }

  transport::SegmentDescriptor alloc_segment(SessionId session, const std::string& name, std::uint64_t length);
  transport::SegmentDescriptor open_segment(SessionId session, const std::string& name);
  void close_segment(SessionId session, const std::string& name);
  // The sessions that hold segment `name` open (alloc_segment or open_segment
  // without close_segment): those whose clients can read and write it; and
  // how many handles it ever gave out, so that a repair that reads it twice
  // knows whether any client opened it in between (and may have written it).
  struct SegmentUsers {
    std::vector<SessionId> sessions;
    std::uint64_t opens = 0;
  };
  SegmentUsers segment_users(const std::string& name) const;
  // Unlinks segment `name` (its memory goes once no handle holds it); false
  // when there is none.
  bool unlink(const std::string& name);

  // Digests of segment `name` from `offset` for `length` bytes, one per
  // `chunk` bytes (the last may be shorter): 16 bytes each (XXH3-128). A
  // repair compares two copies by them (repair.cpp).
  std::vector<std::uint8_t> digest(const std::string& name, std::uint64_t offset, std::uint64_t length,
                                   std::uint64_t chunk) const;
  // Sets a segment's version (a repaired copy takes its source's), between
  // ops; it follows its primary again (Segment::behind).
  void set_version(const std::string& name, std::uint64_t version);
  // An ordered op on `name` waited in vain for its predecessor (Segment::behind).
  void fell_behind(const std::string& name);
  bool is_behind(const std::string& name) const;

  // Applies a vector op (or an atomic); returns the segment's new version.
  // With `wait` false it does not wait for another op on the same buffer:
  // nullopt when one is running (the caller hands the op to a thread that
  // may wait). Throws OrderGap for an ordered op that came early.
  std::optional<Applied> apply(const VectorRequest& request, bool wait = true);
  std::uint64_t version(const std::string& name) const;
  // The version, and the version that the op being applied now will reach
  // (equal when none is: the segment is between ops).
  struct SettledVersion {
    std::uint64_t now = 0;
    std::uint64_t after_running = 0;
  };
  SettledVersion settled_version(const std::string& name) const;

  // The session's handles close.
  void session_closed(SessionId session);
  // A server-assisted op's segment; nullopt where there is none, or where
  // it is outside `scope` (the channel's credential prefix, empty: any).
  std::optional<transport::SegmentAccess> resolve(std::uint64_t segment_id, std::string_view scope) const;
  // Segment `name`'s memory, kept alive by the result (a pull_copy writes
  // into it); throws Errc::not_found.
  transport::SegmentAccess access(const std::string& name) const;
  ServerStats stats() const;
  // A page of the segments, those whose names start with `scope` only.
  Page<BufferSummary> buffers(const std::string& after, std::size_t limit, std::string_view scope = {}) const;

 private:
  transport::SegmentDescriptor describe(const Segment& segment) const;
  void clear(const SegmentAllocator::Allocation& taken);  // a new buffer's range: zeros, faulted in
  std::shared_ptr<Segment> find(const std::string& name) const;
  // A vector op's checks against its segments before it touches memory;
  // returns its x (in the request or in `source`, which it finds).
  const std::byte* check_vector_op(const VectorRequest& r, const Segment& target,
                                   std::shared_ptr<Segment>& source) const;
  // Under mutex_:
  void add_handle(SessionId session, Segment& segment);
  void release_handle(SessionId session, std::uint64_t segment_id);

  MemoryPool& pool_;
  transport::ServerTransport& transport_;
  SegmentAllocator allocator_;
  std::unique_ptr<transport::Registration> pool_registration_;  // where the transport registers the pool once
  const SessionQuotas quotas_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Segment>> by_name_;
  std::map<std::uint64_t, std::shared_ptr<Segment>> by_id_;  // includes unlinked, still open
  std::map<SessionId, std::map<std::uint64_t, std::uint32_t>> handles_;  // session -> segment -> count
  std::map<SessionId, std::uint64_t> handle_counts_;                     // session -> handles, for its quota
  std::uint64_t next_segment_id_ = 1;
};

}  // namespace smb::server
