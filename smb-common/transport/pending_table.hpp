#pragma once
// Ops waiting for a server's reply, by token: the id a request carries and
// its reply echoes (call_wire.hpp). Every transport's client keeps its
// two-sided ops here, so that matching a reply, failing what a dead server
// owed and forgetting what a timed-out caller abandoned follow one set of
// rules. Not locked itself: the transport's lock guards it.
#include "transport/completion.hpp"

#include <cstdint>
#include <optional>
#include <unordered_map>

namespace smb::transport {

// `Op` has a `CompletionPtr completion` member.
template <class Op>
class PendingTable {
 public:
  std::uint64_t add(Op op) {
    const std::uint64_t token = next_token_++;
    ops_.emplace(token, std::move(op));
    return token;
  }
  // The op a reply answers; nullopt for an unknown token (forged, or its
  // op was abandoned or failed: a late reply is dropped).
  std::optional<Op> take(std::uint64_t token) {
    auto it = ops_.find(token);
    if (it == ops_.end()) return std::nullopt;
    Op op = std::move(it->second);
    ops_.erase(it);
    return op;
  }
  bool contains(std::uint64_t token) const { return ops_.contains(token); }
  // Fails the op with `token`, if it is still waiting.
  void fail(std::uint64_t token, Errc code, const std::string& message) {
    if (auto op = take(token)) op->completion->finish(code, message);
  }
  // Fails every waiting op for which `which(op)` holds.
  template <class Which>
  void fail_if(Which&& which, Errc code, const std::string& message) {
    for (auto it = ops_.begin(); it != ops_.end();) {
      if (which(it->second)) {
        it->second.completion->finish(code, message);
        it = ops_.erase(it);
      } else {
        ++it;
      }
    }
  }
  void fail_all(Errc code, const std::string& message) {
    fail_if([](const Op&) { return true; }, code, message);
  }
  // Forgets the ops of a completion that timed out: their replies can no
  // longer write into the caller's memory.
  void forget(const Completion& completion) {
    std::erase_if(ops_, [&](const auto& entry) { return entry.second.completion.get() == &completion; });
  }
  std::size_t size() const { return ops_.size(); }

 private:
  std::unordered_map<std::uint64_t, Op> ops_;
  std::uint64_t next_token_ = 1;
};

}  // namespace smb::transport
