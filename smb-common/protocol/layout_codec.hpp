#pragma once
// A buffer's layout record, as stored on its home server and sent to clients.
#include "protocol/messages.hpp"

#include <smb/client.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace smb::protocol {

inline constexpr std::size_t kMaxServersPerBuffer = 4096;
// The most memory one smbd lends (--capacity): 256 TiB. A layout whose
// shares could not fit on servers of this size is forged or corrupt.
inline constexpr std::uint64_t kMaxServerCapacity = 1ull << 48;

Body layout_to_body(const Layout& layout);
// Validates everything a peer could get wrong, as the client builds layouts:
// name, a stripe unit that is a positive multiple of 8, shares that follow
// from the geometry and fit a server of kMaxServerCapacity, 1 to
// kMaxServersPerBuffer distinct, well-formed server addresses, stale
// copies that exist, each named once, never every copy of a stripe.
Layout layout_from_body(const Body& body, std::string_view what);

// Whether `layout` records copy `copy` as stale (Layout::stale).
inline bool is_stale(const Layout& layout, CopyRef copy) {
  return std::find(layout.stale.begin(), layout.stale.end(), copy) != layout.stale.end();
}

// A position (the server of its stripes' first copy) whose stripes have no
// copy left out of layout.stale, if there is one.
std::optional<std::uint32_t> position_left_without_copy(const Layout& layout);

// The home server of a name: where its layout record lives. Every client
// hashes the name (xxh64) over the *sorted* server list, so clients that
// were given the same servers in any order agree without a master.
std::size_t home_server_index(std::string_view name, const std::vector<std::string>& sorted_servers);

}  // namespace smb::protocol
