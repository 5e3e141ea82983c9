#pragma once
// A buffer's data path: how its ops reach its copies. One strategy per
// buffer, chosen when it opens (BufferCore's constructor, by the layout's
// copies), behind this interface; BufferCore checks each request and hands
// it over, and no other code asks how many copies a buffer has.
//
//   StripedPath    (striped_path.*)      one copy: each piece to its one
//                                        server, one-sided where the
//                                        transport can, vector ops as calls
//   ReplicatedPath (replicated_path.*,   every copy: writes to all, reads
//                   replicated_io.cpp,   from the first usable one, vector
//                   ordered_ops.cpp)     ops and atomics in one order on all,
//                                        stale copies left and recorded,
//                                        failover, a repair's pauses
//
// As UCX's ucp/rma and ucp/amo keep one file per operation and protocol,
// each strategy keeps its own files; adding an op is one method here and
// one in each strategy.
#include "protocol/fixed_calls.hpp"

#include <smb/client.hpp>
#include <smb/vector_ops.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace smb::detail {
class BufferCore;
}

namespace smb::client {

class ServerCalls;

// Vector ops: one part per position (its stripes are contiguous on their server).
struct VectorPart {
  std::uint64_t local_offset = 0;  // first byte of the region in the position's segments
  std::uint64_t length = 0;
  std::span<const std::byte> x;     // inline x, in local order: the caller's bytes when one piece,
  std::vector<std::byte> gathered;  // else gathered here
};
struct VectorCallArgs {
  VectorOp op;
  DType type;
  double alpha;
  std::uint64_t chunk;                    // bytes per call
  const detail::BufferCore* source;       // x there (apply_from), else inline or none
  std::int64_t source_shift;              // source local offset minus target local offset
};
using VectorParts = std::map<std::uint32_t, VectorPart>;  // by position
using Describe = std::function<std::string()>;          // what a failure names (built only then)

class DataPath {
 public:
  virtual ~DataPath() = default;
  // Checked by BufferCore: in range.
  virtual Request write(std::uint64_t offset, std::span<const std::byte> data) = 0;
  virtual Request read(std::uint64_t offset, std::span<std::byte> out) = 0;
  // Checked: in range, 8-byte aligned. Returns the word before the op.
  virtual std::uint64_t atomic(protocol::AtomicKind kind, std::uint64_t offset, std::uint64_t operand,
                               std::uint64_t desired) = 0;
  virtual void apply(const VectorCallArgs& args, const VectorParts& parts, const Describe& what) = 0;
  // The copy whose version answers for position p's stripes (`op` names the read).
  virtual std::uint32_t version_copy(std::uint32_t position, const char* op) = 0;
  // Copies other clients recorded stale (Layout::stale): no longer used.
  virtual void learn_stale(const std::vector<CopyRef>& stale) = 0;
  // A repair's end (BufferCore::adopt): copy r on server s was opened anew
  // there; then, the layout it left, whose stale copies it rebuilt in place.
  virtual void copy_reopened(std::uint32_t replica, std::uint32_t server) = 0;
  virtual void adopted(const Layout& layout) = 0;
  // The buffer closes (before its segments do).
  virtual void close() = 0;
  // Checked: in range. Where this process maps [offset, offset + length)
  // (Buffer::mapping): one copy only, since writes there reach no other.
  virtual std::byte* mapped(std::uint64_t /*offset*/, std::uint64_t /*length*/) { return nullptr; }
};

}  // namespace smb::client
