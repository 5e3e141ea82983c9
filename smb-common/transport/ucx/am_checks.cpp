#include "transport/ucx/am_checks.hpp"

#include <atomic>

namespace smb::transport::ucx {

Errc check_request(const SegmentResolver& resolver, const AmRequestHeader& h, SegmentAccess& access) {
  auto found = resolver(h.segment_id);
  if (!found) return Errc::not_found;
  if (h.offset > found->length || h.length > found->length - h.offset) return Errc::out_of_range;
  access = std::move(*found);
  return Errc::ok;
}

Errc check_atomic(const SegmentResolver& resolver, const AmAtomicHeader& h, SegmentAccess& access) {
  const Errc found =
      check_request(resolver, AmRequestHeader{h.token, h.segment_id, h.offset, sizeof(std::uint64_t)}, access);
  if (found != Errc::ok) return found;
  if (h.offset % sizeof(std::uint64_t) != 0) return Errc::invalid_argument;
  const auto op = static_cast<AmAtomicOp>(h.op);
  return op == AmAtomicOp::fetch_add || op == AmAtomicOp::compare_swap ? Errc::ok : Errc::protocol;
}

std::uint64_t apply_atomic(const AmAtomicHeader& h, const SegmentAccess& access) {
  std::atomic_ref<std::uint64_t> word(*reinterpret_cast<std::uint64_t*>(access.base + h.offset));
  if (static_cast<AmAtomicOp>(h.op) == AmAtomicOp::fetch_add) return word.fetch_add(h.operand);
  std::uint64_t old = h.compare;
  word.compare_exchange_strong(old, h.operand);
  return old;
}

}  // namespace smb::transport::ucx
