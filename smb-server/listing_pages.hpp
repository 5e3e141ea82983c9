#pragma once
// Listings page by name (stat's buffers, list_layouts): a page holds what
// follows `after` in name order, bounded in entries and in bytes, so that
// any reply fits in a frame, and names where the next page starts.
#include <smb/client.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace smb::server {

// One page of a listing, in name order: what follows `after`, and the name
// to ask after for the next page (empty on the last page).
template <class T>
struct Page {
  std::vector<T> items;
  std::string next;
};
inline constexpr std::size_t kMaxPageEntries = 1000;
inline constexpr std::size_t kMaxPageBytes = 512 * 1024;

// Roughly what an entry costs in a reply, to keep pages under kMaxPageBytes
// (and a layout record's bytes against its creator's quota).
inline std::size_t reply_cost(const BufferSummary& b) { return b.name.size() + 48; }
inline std::size_t reply_cost(const Layout& l) {
  std::size_t bytes = l.name.size() + 64;
  for (const auto& s : l.servers) bytes += s.size() + 16;
  return bytes;
}

// One page of `entries` (a name-ordered map) after `after`: at most `limit`
// entries that `take` accepts, converted by `make`.
template <class T, class Map, class Take, class Make>
Page<T> page_of(const Map& entries, const std::string& after, std::size_t limit, Take take, Make make) {
  Page<T> page;
  limit = std::clamp<std::size_t>(limit, 1, kMaxPageEntries);
  std::size_t bytes = 0;
  for (auto it = entries.upper_bound(after); it != entries.end(); ++it) {
    if (!take(it->second)) continue;
    T item = make(it->second);
    bytes += reply_cost(item);
    if (page.items.size() == limit || (bytes > kMaxPageBytes && !page.items.empty())) {
      page.next = page.items.back().name;
      break;
    }
    page.items.push_back(std::move(item));
  }
  return page;
}

}  // namespace smb::server
