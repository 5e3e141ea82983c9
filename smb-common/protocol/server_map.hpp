#pragma once
// Servers replaced at new addresses (docs/reliability.md, "Replacing a
// server"). A fabric's servers are named by the addresses they were listed
// under (SMB_SERVERS, a layout's `servers`): that name is a *slot*, which
// layouts, stripes and the keepers of layout records (home_server_index)
// are computed from. A machine that dies for good is replaced by a new one
// at another address; the slot keeps its name and is served at the new
// address from then on, so no layout, home or client list changes.
//
// Each smbd keeps the map it was told (replace_server) and hands it to every
// client in its hello; clients resolve a slot through it before they
// connect. Each entry carries an epoch that grows with every replacement of
// its slot, so that maps from different servers merge to the newest.
#include "protocol/messages.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace smb::protocol {

// At most this many slots replaced in one fabric (a map's size on the wire).
inline constexpr std::size_t kMaxReplacedServers = 4096;

class ServerMap {
 public:
  struct Entry {
    std::string address;
    std::uint64_t epoch = 0;
    bool operator==(const Entry&) const = default;
  };

  // Where `slot` is served now: its replacement's address, else the slot itself.
  const std::string& resolve(const std::string& slot) const;
  // The slot that `address` serves as a replacement, if any.
  std::optional<std::string> slot_of(std::string_view address) const;
  // Records that `slot` is served at `address` from now on (at its own
  // address again: the entry goes), at an epoch above the one it had.
  // Throws invalid_argument where `address` already serves another slot.
  // Returns the new entry.
  Entry replace(const std::string& slot, const std::string& address);
  // Takes the entries of another server's map (a hello's or a reply's
  // `replaced`) that are newer than ours; validates them. True when ours changed.
  bool merge(const Body& replaced, const std::string& context);
  // {slot: [address, epoch], ...}
  Body to_body() const;
  bool empty() const { return entries_.empty(); }
  const std::map<std::string, Entry>& entries() const { return entries_; }

 private:
  // By slot. An entry whose address is its slot says the slot is back at its
  // own address (it keeps its epoch, so that an older replacement cannot win).
  std::map<std::string, Entry> entries_;
};

}  // namespace smb::protocol
