#include "protocol/striping.hpp"

namespace smb::protocol {

std::uint64_t StripeGeometry::share(std::uint32_t index) const {
  if (servers == 0 || stripe_unit == 0 || index >= servers) return 0;
  const std::uint64_t full_stripes = size / stripe_unit;
  const std::uint64_t tail = size % stripe_unit;
  std::uint64_t bytes = (full_stripes / servers) * stripe_unit;
  const std::uint64_t extra = full_stripes % servers;  // servers 0..extra-1 get one more
  if (index < extra) bytes += stripe_unit;
  if (tail != 0 && index == extra) bytes += tail;
  return bytes;
}

StripePiece locate(const StripeGeometry& g, std::uint64_t offset) {
  const std::uint64_t stripe = offset / g.stripe_unit;
  const std::uint64_t in_stripe = offset % g.stripe_unit;
  return StripePiece{static_cast<std::uint32_t>(stripe % g.servers), (stripe / g.servers) * g.stripe_unit + in_stripe, 0,
                     g.stripe_unit - in_stripe};
}

std::vector<StripePiece> split_range(const StripeGeometry& g, std::uint64_t offset,
                                     std::uint64_t length) {
  std::vector<StripePiece> pieces;
  if (length == 0 || g.servers == 0 || g.stripe_unit == 0) return pieces;
  std::uint64_t pos = offset;
  const std::uint64_t end = offset + length;
  while (pos < end) {
    StripePiece piece = locate(g, pos);
    const std::uint64_t take = std::min(piece.length, end - pos);
    piece.request_offset = pos - offset;
    piece.length = take;
    // With one server consecutive stripes are contiguous everywhere: merge.
    if (!pieces.empty()) {
      StripePiece& last = pieces.back();
      if (last.server == piece.server && last.local_offset + last.length == piece.local_offset &&
          last.request_offset + last.length == piece.request_offset) {
        last.length += take;
        pos += take;
        continue;
      }
    }
    pieces.push_back(piece);
    pos += take;
  }
  return pieces;
}

}  // namespace smb::protocol
