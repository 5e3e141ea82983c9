// The ops a replicated buffer's copies must apply in one order -- vector ops
// and atomics (BufferOptions::replicas > 1) -- from the client's side.
//
// The copies form a chain. The first copy that takes changes (copy 0 while
// it lives) orders a position's ops: each call there comes back with the
// version it brought its segment to. The next copy applies the same call
// tagged with that version, right after the call before it in that order
// (smbd: VectorRequest::order), and only then the copy after it, tagged with
// the versions the copy before it gave. So every copy applies every op in
// one order and they stay bit-identical, floating-point sums and
// compare-swaps included. Why a chain, not copy 0 tagging every other copy
// at once: where copy 0 dies, the next copy orders alone, and a copy further
// on must never hold an op in copy 0's order that the new orderer placed
// elsewhere. In a chain a copy only ever receives the order of the copy
// before it. The price is one more round trip per extra copy (measured in
// docs/reliability.md, "Three copies").
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
  // One position's op on its way down the chain.
  struct Chain {
    std::uint32_t position = 0;
    std::uint32_t orderer = 0;                 // the copy whose order the op took
    std::vector<protocol::FixedReply> decided;  // its replies: the op's answer
    std::vector<std::uint64_t> orders;          // the versions it gave, one per call
    std::uint32_t replica = 0;                  // the copy being called
    std::unique_ptr<ServerCalls> calls;
  };
  auto start = [&](Chain& chain, std::uint32_t replica, const std::vector<std::uint64_t>* orders) {
    chain.replica = replica;
    chain.calls = std::make_unique<ServerCalls>(buffer_.client_, what);
    add(*chain.calls, chain.position, replica, orders);
  };
  auto take_order = [](Chain& chain, std::vector<protocol::FixedReply> replies) {
    chain.orderer = chain.replica;
    chain.orders.clear();
    for (const auto& reply : replies) chain.orders.push_back(reply.version);
    chain.decided = std::move(replies);
  };
  // The first copy of every position; when its server is lost, the next copy, untagged.
  std::vector<Chain> chains(positions.size());
  for (std::size_t i = 0; i < positions.size(); ++i) {
    chains[i].position = positions[i];
    start(chains[i], first_taking_changes(positions[i], op), nullptr);
  }
  for (auto& chain : chains) {
    for (;;) {
      try {
        take_order(chain, chain.calls->finish_fixed());
        break;
      } catch (const Error& e) {
        if (!is_absence(e)) throw;
        // Lost before it answered: it may or may not have applied the op, but
        // no other copy has it yet (they get it only after this one answered).
        const auto s = buffer_.replica_server(chain.position, chain.replica);
        mark_stale(chain.replica, s, an(op) + " failed: " + e.what(), buffer_.alive(s));
        start(chain, first_taking_changes(chain.position, op), nullptr);
      }
    }
  }
  // Down the chain: each later copy of every position at once, tagged with the order so far.
  for (std::uint32_t r = 1; r < buffer_.replicas(); ++r) {
    std::vector<Chain*> calling;
    for (auto& chain : chains) {
      if (chain.orderer >= r || !takes_changes(r, buffer_.replica_server(chain.position, r), op)) continue;
      start(chain, r, &chain.orders);
      calling.push_back(&chain);
    }
    for (auto* chain : calling) {
      const auto server = buffer_.replica_server(chain->position, r);
      try {
        const auto replies = chain->calls->finish_fixed();
        // Applied in the same place of the same order, an atomic finds the same
        // word: one that did not was changed apart from the ordered ops (a
        // write racing them on the same bytes), and this copy has diverged.
        const bool diverged = !std::equal(replies.begin(), replies.end(), chain->decided.begin(),
                                          [](const auto& mine, const auto& first) { return mine.old == first.old; });
        if (diverged)
          mark_stale(r, server,
                     "its word differed from copy " + std::to_string(chain->orderer) +
                         "'s at the same place in their order (a write raced the " + std::string(op) + " on the same bytes)",
                     true);
      } catch (const Error& e) {
        if ((e.code() == Errc::out_of_order || e.code() == Errc::timeout) && !answers(chain->position, chain->orderer)) {
          // The copy that ordered the op died after it answered: ops of
          // clients that saw it die took this copy's next versions, or one it
          // ordered never comes. This copy orders now: the op goes after what
          // it has, its answer is the op's (the orderer's state is gone with
          // it), and the copies after it follow its order.
          start(*chain, r, nullptr);
          take_order(*chain, chain->calls->finish_fixed());
        } else if (is_absence(e) || e.code() == Errc::out_of_order) {
          // Gone (the others have the op), or left behind by the order (an op
          // before this one never came: its client died between the copies).
          mark_stale(r, server, "it missed " + an(op) + ": " + e.what(), buffer_.alive(server));
        } else {
          throw;
        }
      }
    }
  }
  std::vector<std::vector<protocol::FixedReply>> decided;
  decided.reserve(chains.size());
  for (auto& chain : chains) decided.push_back(std::move(chain.decided));
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

bool ReplicatedPath::answers(std::uint32_t position, std::uint32_t replica) {
  auto* link = buffer_.link_at(buffer_.replica_server(position, replica));
  if (link == nullptr || !link->alive()) return false;
  try {
    ServerCalls probe(buffer_.client_, "probe of copy " + std::to_string(replica));
    probe.add_version_call(*link, protocol::VersionCallKind::get, buffer_.segment_names_[replica], 0, buffer_.client_->timeout());
    probe.finish_versions();
    return true;
  } catch (const Error& e) {
    if (is_absence(e)) return false;
    throw;
  }
}

}  // namespace smb::client
