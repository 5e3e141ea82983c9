#pragma once
// What one smbd holds: the segments of every buffer striped onto it, and the
// layout records of the buffers whose home it is. Every handle a client
// opens is tracked per session, so a client that disconnects releases them.
//
// A destroyed buffer's name is free at once; its memory returns to the pool
// when the last handle on it closes (as with unlink), so a client still
// holding the old remote key never writes into another buffer's memory.
#include "limits.hpp"
#include "memory_pool.hpp"
#include "protocol/fixed_calls.hpp"
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
  bool unlinked = false;
  SegmentAllocator* allocator = nullptr;
  std::mutex op_mutex;                    // server-side vector ops apply one at a time
  std::atomic<std::uint64_t> version{0};  // advanced by every applied vector op
  // Vector ops begun (under op_mutex, before they touch memory): above
  // `version` while one is being applied, so a reader can tell a segment in
  // the middle of an op from one between ops (Registry::settled_version).
  std::atomic<std::uint64_t> begun{0};
  // A copy whose ordered op waited in vain for the op before it (its
  // client died between the copies): it no longer follows its primary, so
  // later ordered ops are refused at once instead of each waiting (until a
  // repair gives it its source's version: set_version).
  std::atomic<bool> behind{false};
  ~Segment();
};

// A server-side vector op on this server's piece of a buffer, validated by
// Registry::apply before it touches memory.
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

// What Registry::apply did: the segment's new version, and an atomic's old word.
struct Applied {
  std::uint64_t version = 0;
  std::uint64_t old = 0;
};

// Registry::apply: an ordered op arrived before the op it must follow.
struct OrderGap {
  std::uint64_t wait_for = 0;  // the version to wait for, then try again
};

struct ServerStats {
  std::uint64_t capacity = 0;
  std::uint64_t used = 0;
  std::uint64_t largest_free = 0;
  bool huge_pages = false;
  std::uint64_t buffer_count = 0;  // segments held here
};

// One page of a listing, in name order: what follows `after`, and the name
// to ask after for the next page (empty on the last page). Pages are bounded
// in entries and in bytes, so that any reply fits in a frame.
template <class T>
struct Page {
  std::vector<T> items;
  std::string next;
};
inline constexpr std::size_t kMaxPageEntries = 1000;
inline constexpr std::size_t kMaxPageBytes = 512 * 1024;

class Registry {
 public:
  Registry(MemoryPool& pool, transport::ServerTransport& transport, const SessionQuotas& quotas = {});

  transport::SegmentDescriptor alloc_segment(SessionId session, const std::string& name, std::uint64_t length);
  transport::SegmentDescriptor open_segment(SessionId session, const std::string& name);
  void close_segment(SessionId session, const std::string& name);
  // The sessions that hold segment `name` open (alloc_segment or open_segment
  // without close_segment): those whose clients can read and write it.
  std::vector<SessionId> segment_sessions(const std::string& name) const;
  // Drops this server's segment and, on the home, the layout record.
  void destroy(const std::string& name);

  // Layout records (home server only).
  void reserve_name(SessionId session, const Layout& layout);
  void commit_layout(SessionId session, const std::string& name);
  void abandon_name(SessionId session, const std::string& name);
  Layout get_layout(const std::string& name) const;
  // Repair (smbctl repair): marks the record as being repaired by `session`
  // until end_repair or until the session closes (clients go on meanwhile:
  // repair_pauses.hpp). Throws busy when another session repairs it.
  Layout begin_repair(SessionId session, const std::string& name);
  // Ends `session`'s repair; with `instances`, the record's servers' runs
  // become those (the repaired copies are held there now); the copies in
  // `fresh` were rebuilt and are no longer stale.
  void end_repair(SessionId session, const std::string& name, const std::vector<std::uint64_t>* instances,
                  const std::vector<CopyRef>& fresh);
  // Records that a copy fell behind the others (a client missed it with a
  // write or a vector op while its server lived): no client reads it until
  // a repair rebuilds it (Layout::stale). Refused with data_lost where no
  // other copy of its stripes is left. Returns the record as it is now, and
  // whether the copy was not stale before.
  std::pair<Layout, bool> mark_stale(const std::string& name, CopyRef copy);
  // Throws unless `session` repairs `name` now (begin_repair).
  void check_repairer(SessionId session, const std::string& name) const;
  // Digests of this server's segment `name` from `offset` for `length`
  // bytes, one per `chunk` bytes (the last may be shorter): 16 bytes each
  // (XXH3-128). A repair compares two copies by them (repair.cpp).
  std::vector<std::uint8_t> digest(const std::string& name, std::uint64_t offset, std::uint64_t length,
                                   std::uint64_t chunk) const;
  // Sets a segment's version (a repaired copy takes its source's), between
  // ops; it follows its primary again (Segment::behind).
  void set_version(const std::string& name, std::uint64_t version);
  // An ordered op on `name` waited in vain for its predecessor (Segment::behind).
  void fell_behind(const std::string& name);
  bool is_behind(const std::string& name) const;
  Page<Layout> list_layouts(const std::string& after, std::size_t limit) const;

  // Applies a vector op (or an atomic); returns the segment's new version.
  // With `wait` false it does not wait for another op on the same buffer:
  // nullopt when one is running (the caller hands the op to a thread that
  // may wait).
  std::optional<Applied> apply(const VectorRequest& request, bool wait = true);
  std::uint64_t version(const std::string& name) const;
  // The version, and the version that the op being applied now will reach
  // (equal when none is: the segment is between ops).
  struct SettledVersion {
    std::uint64_t now = 0;
    std::uint64_t after_running = 0;
  };
  SettledVersion settled_version(const std::string& name) const;

  void session_closed(SessionId session);
  std::optional<transport::SegmentAccess> resolve(std::uint64_t segment_id) const;
  ServerStats stats() const;
  Page<BufferSummary> buffers(const std::string& after, std::size_t limit) const;

 private:
  struct Record {
    Layout layout;
    bool committed = false;
    SessionId owner = 0;    // the creator, until it commits
    SessionId creator = 0;  // counts against this session's quota while it lasts
    std::uint64_t bytes = 0;
    SessionId repairer = 0;  // the session repairing it (begin_repair), or 0
  };
  // What one session holds, for its quotas.
  struct Usage {
    std::uint64_t handles = 0;
    std::uint64_t layouts = 0;
    std::uint64_t layout_bytes = 0;
  };
  transport::SegmentDescriptor describe(const Segment& segment) const;
  std::shared_ptr<Segment> find(const std::string& name) const;
  // A vector op's checks against its segments before it touches memory;
  // returns its x (in the request or in `source`, which it finds).
  const std::byte* check_vector_op(const VectorRequest& r, const Segment& target,
                                   std::shared_ptr<Segment>& source) const;
  // Under mutex_:
  void add_handle(SessionId session, Segment& segment);
  void release_handle(SessionId session, std::uint64_t segment_id);
  void erase_record(std::map<std::string, Record>::iterator it);

  MemoryPool& pool_;
  transport::ServerTransport& transport_;
  SegmentAllocator allocator_;
  std::unique_ptr<transport::Registration> pool_registration_;  // where the transport registers the pool once
  const SessionQuotas quotas_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Segment>> by_name_;
  std::map<std::uint64_t, std::shared_ptr<Segment>> by_id_;  // includes unlinked, still open
  std::map<std::string, Record> records_;
  std::map<SessionId, std::map<std::uint64_t, std::uint32_t>> handles_;  // session -> segment -> count
  std::map<SessionId, Usage> usage_;
  std::uint64_t next_segment_id_ = 1;
};

}  // namespace smb::server
