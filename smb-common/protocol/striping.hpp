#pragma once
// Striping arithmetic: how a buffer's byte range maps onto its servers.
// Stripe k (bytes [k*U, (k+1)*U)) lives on server k mod N at local offset
// (k div N) * U, so each server's share is one contiguous segment.
#include <cstdint>
#include <vector>

namespace smb::protocol {

struct StripeGeometry {
  std::uint64_t size = 0;         // buffer bytes
  std::uint64_t stripe_unit = 0;  // bytes per stripe
  std::uint32_t servers = 0;      // N

  // Bytes server `index` holds.
  std::uint64_t share(std::uint32_t index) const;
};

// One contiguous piece of a user request that lands on one server.
struct StripePiece {
  std::uint32_t server = 0;        // index into the layout's server list
  std::uint64_t local_offset = 0;  // offset inside that server's segment
  std::uint64_t request_offset = 0;  // offset inside the caller's span
  std::uint64_t length = 0;
};

// Where byte `offset` lives: its server and local offset (request_offset 0,
// length the bytes left in its stripe). Precondition: offset < geometry.size.
StripePiece locate(const StripeGeometry& geometry, std::uint64_t offset);

// Copies (BufferOptions::replicas): copy r of the stripes at position p
// (their server in copy 0) lives on server (p + r) mod N, at the same local
// offsets; so server s holds, for copy r, the share of position (s - r) mod N.
inline std::uint32_t copy_server(std::uint32_t position, std::uint32_t replica, std::uint32_t servers) {
  return (position + replica) % servers;
}
inline std::uint32_t copy_position(std::uint32_t server, std::uint32_t replica, std::uint32_t servers) {
  return (server + servers - replica % servers) % servers;
}

// Splits [offset, offset+length) into per-server pieces. Pieces that are
// contiguous both on the server and in the caller's span are merged.
// Precondition (checked by callers): offset + length <= geometry.size.
std::vector<StripePiece> split_range(const StripeGeometry& geometry, std::uint64_t offset,
                                     std::uint64_t length);

}  // namespace smb::protocol
