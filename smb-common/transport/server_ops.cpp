#include "transport/server_ops.hpp"

#include <atomic>

namespace smb::transport {

Errc check_range(const SegmentResolver& resolver, std::string_view scope, std::uint64_t segment_id,
                 std::uint64_t offset, std::uint64_t length, SegmentAccess& access) {
  auto found = resolver(segment_id, scope);
  if (!found) return Errc::not_found;
  if (offset > found->length || length > found->length - offset) return Errc::out_of_range;
  access = std::move(*found);
  return Errc::ok;
}

Errc check_atomic(const SegmentResolver& resolver, std::string_view scope, const AtomicRequest& request,
                  SegmentAccess& access) {
  const Errc found = check_range(resolver, scope, request.segment_id, request.offset, sizeof(std::uint64_t), access);
  if (found != Errc::ok) return found;
  if (request.offset % sizeof(std::uint64_t) != 0) return Errc::invalid_argument;
  const auto op = static_cast<AtomicOp>(request.op);
  return op == AtomicOp::fetch_add || op == AtomicOp::compare_swap ? Errc::ok : Errc::protocol;
}

std::uint64_t apply_atomic(const AtomicRequest& request, const SegmentAccess& access) {
  std::atomic_ref<std::uint64_t> word(*reinterpret_cast<std::uint64_t*>(access.base + request.offset));
  if (static_cast<AtomicOp>(request.op) == AtomicOp::fetch_add) return word.fetch_add(request.operand);
  std::uint64_t old = request.compare;
  word.compare_exchange_strong(old, request.operand);
  return old;
}

}  // namespace smb::transport
