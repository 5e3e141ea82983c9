#pragma once
// Replica order: a replicated buffer's ops apply to every copy in the same
// order (docs/reliability.md, "Replication"). The client numbers each op on
// a copy with the version it brings that copy to (VectorRequest::order);
// the copy applies it only right after the op before it. This is the gate
// each ordered op passes, under its segment's op mutex, before it touches
// memory -- a pure function of the copy's state, tested alone
// (tests/unit/replica_order_test.cpp).
#include <cstdint>
#include <string>

namespace smb::server {

enum class OrderVerdict {
  apply,           // its turn: the op before it is applied
  wait,            // it came before the op it follows: wait for version wait_for, then pass again
  refuse_behind,   // this copy fell behind (an op before it never came): refused until repaired
  refuse_taken,    // its place is taken: this copy no longer follows its primary
};

struct OrderCheck {
  OrderVerdict verdict = OrderVerdict::apply;
  std::uint64_t wait_for = 0;  // wait: the version to wait for
};

// `version`: the copy's version now; `order`: the op's (0: unordered, always
// applies); `behind`: the copy gave up waiting for an op before (Segment::behind).
OrderCheck check_order(std::uint64_t version, std::uint64_t order, bool behind) noexcept;

// The refusal's text for `what` (the op on its buffer), naming the order and the version.
std::string order_refusal(const OrderCheck& check, const std::string& what, std::uint64_t order,
                          std::uint64_t version);

// SegmentStore::apply: an ordered op arrived before the op it must follow.
struct OrderGap {
  std::uint64_t wait_for = 0;  // the version to wait for, then try again
};

}  // namespace smb::server
