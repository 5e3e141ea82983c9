#pragma once
// A buffer of several copies (BufferOptions::replicas > 1; data_path.hpp).
// Copy r of the stripes at position p (their server in copy 0) lives on
// server (p + r) mod N at the same offsets, so a request splits once and
// each piece has one place per copy.
//
// - Writes go to every usable copy at once and succeed when every piece
//   reached at least one; a server lost meanwhile is left behind
//   (replicated_io.cpp).
// - Reads take each piece from its first usable copy and, when that server
//   is lost during the read, read the piece again from the next
//   (replicated_io.cpp).
// - Vector ops and atomics take one order on every copy, passed down the
//   chain of copies (ordered_ops.cpp).
// - A copy that misses an op while its server may live is stale: recorded in
//   the layout for every client before the op returns (mark_stale), and
//   never read again until a repair rebuilds it (replicated_path.cpp).
// docs/reliability.md ("Replication") states what this guarantees.
#include "client_core.hpp"

#include <mutex>
#include <set>
#include <utility>

namespace smb::client {

class ReplicatedPath final : public DataPath {
 public:
  explicit ReplicatedPath(detail::BufferCore& buffer);

  Request write(std::uint64_t offset, std::span<const std::byte> data) override;
  Request read(std::uint64_t offset, std::span<std::byte> out) override;
  std::uint64_t atomic(protocol::AtomicKind kind, std::uint64_t offset, std::uint64_t operand,
                       std::uint64_t desired) override;
  void apply(const VectorCallArgs& args, const VectorParts& parts, const Describe& what) override;
  std::uint32_t version_copy(std::uint32_t position, const char* op) override { return first_usable(position, op); }
  void learn_stale(const std::vector<CopyRef>& stale) override;
  void copy_reopened(std::uint32_t replica, std::uint32_t server) override;
  void adopted(const Layout& layout) override;
  // Its holds at the keepers go (repair_watch.cpp).
  void close() override;

 private:
  // Which copies take ops (replicated_path.cpp).
  // Whether copy r on `server` can take ops: held there, server alive, not
  // left behind by its primary (stale_).
  bool usable(std::uint32_t replica, std::uint32_t server);
  // This client leaves copy r on `server`: its server was lost, or the copy
  // missed an op. Recorded at the keepers for every client (Layout::stale);
  // where the server still `lives`, throws data_lost where that would leave
  // no copy of its stripes (then the copies diverged), and unreachable where
  // no keeper could record it (the op that missed it must not be
  // acknowledged).
  void mark_stale(std::uint32_t replica, std::uint32_t server, const std::string& why, bool lives);
  // Before reads or ordered ops fall over to a later copy because a server
  // was lost: the copies other clients recorded stale (once per loss).
  void learn_after_losses();
  // The first usable copy of position p's stripes; throws server_gone, naming
  // the buffer and `op`, when none is (the text is built only then).
  std::uint32_t first_usable(std::uint32_t position, const char* op);
  // For an op that changes the buffer: whether copy r on `server` takes it.
  // One this client cannot use and knows no reason for (its server was down
  // when the buffer was opened here, or its link died before an op failed
  // on it) is recorded stale first: its server may live and serve it to
  // other clients, and it is about to miss an acknowledged op.
  bool takes_changes(std::uint32_t replica, std::uint32_t server, const char* op);
  // The first copy of position p's stripes that takes changes (throws like first_usable).
  std::uint32_t first_taking_changes(std::uint32_t position, const char* op);

  // Ordered ops on every copy, down the chain of copies (ordered_ops.cpp):
  // `add` adds one position's calls on copy `replica`, tagged with `orders`
  // (one per call) on the copies after the one that ordered them. Returns,
  // per position, the replies of the copy whose order the op took.
  using AddOrderedCalls = std::function<void(ServerCalls& calls, std::uint32_t position, std::uint32_t replica,
                                             const std::vector<std::uint64_t>* orders)>;
  std::vector<std::vector<protocol::FixedReply>> run_ordered(const std::vector<std::uint32_t>& positions,
                                                             const AddOrderedCalls& add, const char* op,
                                                             const Describe& what);
  // Whether copy r of position p's stripes still answers.
  bool answers(std::uint32_t position, std::uint32_t replica);

  detail::BufferCore& buffer_;
  std::mutex stale_mutex_;
  std::set<std::pair<std::uint32_t, std::uint32_t>> stale_;       // (copy, server) left behind by its primary
  std::set<std::pair<std::uint32_t, std::uint32_t>> unrecorded_;  // of stale_: no keeper knows (adopt keeps them)
  std::vector<bool> losses_seen_;  // per server: lost, and the record read since (learn_after_losses)
};

}  // namespace smb::client
