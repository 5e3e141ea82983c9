#pragma once
// A buffer's layout record, as stored on its home server and sent to clients.
#include "protocol/messages.hpp"

#include <smb/client.hpp>

#include <string>
#include <vector>

namespace smb::protocol {

inline constexpr std::size_t kMaxServersPerBuffer = 4096;

Body layout_to_body(const Layout& layout);
// Validates everything a peer could get wrong: name, geometry, shares that
// do not follow from the geometry, server addresses.
Layout layout_from_body(const Body& body, std::string_view what);

// The home server of a name: where its layout record lives. Every client
// hashes the name (xxh64) over the *sorted* server list, so clients that
// were given the same servers in any order agree without a master.
std::size_t home_server_index(std::string_view name, const std::vector<std::string>& sorted_servers);

}  // namespace smb::protocol
