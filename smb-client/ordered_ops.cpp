// The ops a replicated buffer's copies must apply in one order -- vector ops
// and atomics (BufferOptions::replicas > 1) -- from the client's side.
//
// Copy 0 orders a position's ops while it lives: each call there comes back
// with the version it brought its segment to, and every other copy applies
// the same call tagged with that version, right after the call before it in
// that order (smbd: VectorRequest::order). So the copies apply every op in
// the same order and stay bit-identical, floating-point sums and
// compare-swaps included. Where copy 0 is lost, the next usable copy takes
// the op untagged (it is then the only one: its arrival order is the order).
// docs/reliability.md ("Replication") states what this guarantees.
#include "replicated_path.hpp"
#include "server_calls.hpp"

#include <algorithm>

namespace smb::client {

namespace {
// "a fetch-add", "an accumulate": how the messages below name the op.
std::string an(const char* op) {
  return (std::string("aeiou").find(op[0]) == std::string::npos ? "a " : "an ") + std::string(op);
}
}  // namespace

std::vector<std::vector<protocol::FixedReply>> ReplicatedPath::run_ordered(const std::vector<std::uint32_t>& positions,
                                                                           const AddOrderedCalls& add, const char* op,
                                                                           const Describe& what) {
  const OpGate::Pass pass(buffer_.gate_);
  struct Run {
    std::uint32_t position = 0;
    std::uint32_t replica = 0;
    std::unique_ptr<ServerCalls> calls;
    std::vector<protocol::FixedReply> replies;  // the ordering copy's
    std::vector<std::uint64_t> orders;          // the versions it gave
  };
  auto start = [&](Run& run, std::uint32_t replica, const std::vector<std::uint64_t>* orders) {
    run.replica = replica;
    run.calls = std::make_unique<ServerCalls>(buffer_.client_, what);
    add(*run.calls, run.position, replica, orders);
  };
  // The first copy of every position; when its server is lost, the next copy, untagged.
  std::vector<Run> firsts(positions.size());
  for (std::size_t i = 0; i < positions.size(); ++i) {
    firsts[i].position = positions[i];
    start(firsts[i], first_taking_changes(positions[i], op), nullptr);
  }
  for (auto& run : firsts) {
    for (;;) {
      try {
        run.replies = run.calls->finish_fixed();
        break;
      } catch (const Error& e) {
        if (!is_absence(e)) throw;
        // Lost before it answered: it may or may not have applied the op, but
        // no other copy has it yet (they get it only after this one answered).
        const auto s = buffer_.replica_server(run.position, run.replica);
        mark_stale(run.replica, s, an(op) + " failed: " + e.what(), buffer_.alive(s));
        start(run, first_taking_changes(run.position, op), nullptr);
      }
    }
    for (const auto& reply : run.replies) run.orders.push_back(reply.version);
  }
  // The other copies of the positions copy 0 ordered, each op tagged with its order.
  struct Follower {
    Run run;
    Run* first = nullptr;
  };
  std::vector<Follower> followers;
  for (auto& first : firsts) {
    if (first.replica != 0) continue;
    for (std::uint32_t r = 1; r < buffer_.replicas(); ++r) {
      if (!takes_changes(r, buffer_.replica_server(first.position, r), op)) continue;
      auto& follower = followers.emplace_back();
      follower.run.position = first.position;
      follower.first = &first;
      start(follower.run, r, &first.orders);
    }
  }
  for (auto& [run, first] : followers) {
    const auto server = buffer_.replica_server(run.position, run.replica);
    try {
      const auto replies = run.calls->finish_fixed();
      // Applied in the same place of the same order, an atomic finds the same
      // word: one that did not was changed apart from the ordered ops (a
      // write racing them on the same bytes), and this copy has diverged.
      const bool diverged = !std::equal(replies.begin(), replies.end(), first->replies.begin(),
                                        [](const auto& mine, const auto& first_copy) { return mine.old == first_copy.old; });
      if (diverged)
        mark_stale(run.replica, server,
                   "its word differed from copy 0's at the same place in their order (a write raced the " + std::string(op) +
                       " on the same bytes)", true);
    } catch (const Error& e) {
      if ((e.code() == Errc::out_of_order || e.code() == Errc::timeout) && !primary_answers(run.position)) {
        // Copy 0 died after it answered: ops of clients that saw it die took
        // this copy's next versions, or one it ordered never comes. This copy
        // is the only one now: the op goes after what it has, and its answer
        // is the op's (copy 0's state is gone with it).
        start(run, run.replica, nullptr);
        first->replies = run.calls->finish_fixed();
      } else if (is_absence(e) || e.code() == Errc::out_of_order) {
        // Gone (the others have the op), or left behind by its primary (an op
        // before this one never came: its client died between the copies).
        mark_stale(run.replica, server, "it missed " + an(op) + ": " + e.what(), buffer_.alive(server));
      } else {
        throw;
      }
    }
  }
  std::vector<std::vector<protocol::FixedReply>> decided;
  decided.reserve(firsts.size());
  for (auto& run : firsts) decided.push_back(std::move(run.replies));
  return decided;
}

void ReplicatedPath::apply(const VectorCallArgs& args, const VectorParts& parts, const Describe& what) {
  std::vector<std::uint32_t> positions;
  for (const auto& [position, part] : parts) positions.push_back(position);
  run_ordered(
      positions,
      [&](ServerCalls& calls, std::uint32_t position, std::uint32_t replica,
          const std::vector<std::uint64_t>* orders) {
        buffer_.add_vector_calls(calls, args, position, parts.at(position), replica, orders);
      },
      vector_op_name(args.op), what);
}

std::uint64_t ReplicatedPath::atomic(protocol::AtomicKind kind, std::uint64_t offset, std::uint64_t operand,
                                     std::uint64_t desired) {
  const char* op = kind == protocol::AtomicKind::fetch_add ? "fetch-add" : "compare-swap";
  const auto piece = protocol::locate(buffer_.geometry(), offset);  // atomic() checked the range and alignment
  const auto decided = run_ordered(
      {piece.server},
      [&](ServerCalls& calls, std::uint32_t position, std::uint32_t replica,
          const std::vector<std::uint64_t>* orders) {
        calls.add_atomic_call(*buffer_.link_at(buffer_.replica_server(position, replica)), kind, buffer_.segment_names_[replica],
                              piece.local_offset, operand, desired, orders != nullptr ? orders->front() : 0);
      },
      op, [this, op, offset] { return buffer_.describe(op, offset, sizeof(std::uint64_t)); });
  return decided.front().front().old;
}

bool ReplicatedPath::primary_answers(std::uint32_t position) {
  if (buffer_.link_at(position) == nullptr || !buffer_.link_at(position)->alive()) return false;
  try {
    ServerCalls probe(buffer_.client_, "probe of copy 0");
    probe.add_version_call(*buffer_.link_at(position), protocol::VersionCallKind::get, buffer_.segment_names_[0], 0, buffer_.client_->timeout());
    probe.finish_versions();
    return true;
  } catch (const Error& e) {
    if (is_absence(e)) return false;
    throw;
  }
}

}  // namespace smb::client
