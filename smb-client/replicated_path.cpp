// Which copies of a replicated buffer take ops (replicated_path.hpp): the
// ones this client may use, the ones left behind and recorded so, what it
// learns of other clients' marks, and what a repair's end gives back.
#include "replicated_path.hpp"

#include "protocol/layout_codec.hpp"

#include <spdlog/spdlog.h>

namespace smb::client {

ReplicatedPath::ReplicatedPath(detail::BufferCore& buffer)
    : buffer_(buffer), losses_seen_(buffer.layout_.servers.size(), true) {  // the record was just read
  for (const auto& copy : buffer_.layout_.stale) stale_.insert({copy.replica, copy.server});
}

void ReplicatedPath::close() { buffer_.client_->release_held(&buffer_, buffer_.layout_.name); }

void ReplicatedPath::copy_reopened(std::uint32_t replica, std::uint32_t server) {
  std::lock_guard lock(stale_mutex_);
  stale_.erase({replica, server});
}

// Stale copies the repair rebuilt where they were (their server stayed):
// used again, unless this client left one that no keeper heard of.
void ReplicatedPath::adopted(const Layout& layout) {
  std::lock_guard lock(stale_mutex_);
  std::erase_if(stale_, [&](const auto& copy) {
    const auto [r, s] = copy;
    return !protocol::is_stale(layout, {r, s}) && !unrecorded_.contains(copy) && buffer_.segment(r, s) != nullptr &&
           buffer_.alive(s);
  });
}

bool ReplicatedPath::usable(std::uint32_t replica, std::uint32_t server) {
  if (buffer_.segment(replica, server) == nullptr || buffer_.link_at(server) == nullptr || !buffer_.link_at(server)->alive()) return false;
  std::lock_guard lock(stale_mutex_);
  return !stale_.contains({replica, server});
}

void ReplicatedPath::mark_stale(std::uint32_t replica, std::uint32_t server, const std::string& why, bool lives) {
  {
    std::lock_guard lock(stale_mutex_);
    if (!stale_.insert({replica, server}).second) return;
  }
  spdlog::warn("buffer '{}': copy {} on server {} is no longer used by this client: {}", buffer_.layout_.name, replica,
               buffer_.layout_.servers[server], why);
  // A server that only seemed lost (a timeout, a partition) keeps a copy
  // that missed this op: every client must leave it, not only this one.
  bool recorded = false;
  try {
    recorded = buffer_.client_->record_stale(buffer_.layout_.name, {replica, server}, why);
  } catch (const Error& e) {
    if (lives) throw Error(e.code(), "buffer '" + buffer_.layout_.name + "': its copies diverged: " + e.what());
  }
  if (recorded) return;
  {
    std::lock_guard lock(stale_mutex_);
    unrecorded_.insert({replica, server});
  }
  // Were the op acknowledged now, a later read or repair could choose the
  // copy that lacks it (nobody else knows it is behind): it fails instead.
  if (lives)
    throw Error(Errc::unreachable, "buffer '" + buffer_.layout_.name + "': copy " + std::to_string(replica) + " on " +
                                       buffer_.layout_.servers[server] + " missed this op (" + why +
                                       ") while its server may live, and no keeper of the buffer's record could be "
                                       "reached to record it behind: the op is not acknowledged (the other copies "
                                       "may have it)");
}

void ReplicatedPath::learn_stale(const std::vector<CopyRef>& stale) {
  std::lock_guard lock(stale_mutex_);
  for (const auto& copy : stale)
    if (copy.replica < buffer_.replicas() && copy.server < buffer_.server_count() && stale_.insert({copy.replica, copy.server}).second)
      spdlog::info("buffer '{}': copy {} on server {} fell behind the others (recorded by another client); no longer used",
                   buffer_.layout_.name, copy.replica, buffer_.layout_.servers[copy.server]);
}

void ReplicatedPath::learn_after_losses() {
  bool lost_since = false;
  {
    std::lock_guard lock(stale_mutex_);
    for (std::uint32_t s = 0; s < buffer_.server_count(); ++s) {
      const bool lost = !buffer_.alive(s);
      lost_since = lost_since || (lost && !losses_seen_[s]);
      losses_seen_[s] = lost;
    }
  }
  if (!lost_since) return;
  try {
    learn_stale(buffer_.client_->recorded_stale(buffer_.layout_.name));
  } catch (const Error& e) {
    spdlog::warn("buffer '{}': after losing a server, its record of stale copies could not be read: {}", buffer_.layout_.name,
                 e.what());
  }
}

bool ReplicatedPath::takes_changes(std::uint32_t replica, std::uint32_t server, const char* op) {
  if (usable(replica, server)) return true;
  {
    std::lock_guard lock(stale_mutex_);
    if (stale_.contains({replica, server})) return false;  // left already, and said why
  }
  mark_stale(replica, server, std::string("this client cannot reach its server for ") + op, /*lives=*/true);
  return false;
}

std::uint32_t ReplicatedPath::first_taking_changes(std::uint32_t position, const char* op) {
  learn_after_losses();
  for (std::uint32_t r = 0; r < buffer_.replicas(); ++r)
    if (takes_changes(r, buffer_.replica_server(position, r), op)) return r;
  return first_usable(position, op);  // none: throws, naming where its copies are
}

std::uint32_t ReplicatedPath::first_usable(std::uint32_t position, const char* op) {
  learn_after_losses();
  for (std::uint32_t r = 0; r < buffer_.replicas(); ++r)
    if (usable(r, buffer_.replica_server(position, r))) return r;
  std::string where;
  for (std::uint32_t r = 0; r < buffer_.replicas(); ++r) {
    const auto s = buffer_.replica_server(position, r);
    bool stale = false;
    {
      std::lock_guard lock(stale_mutex_);
      stale = stale_.contains({r, s});
    }
    where += (r == 0 ? "" : ", ") + buffer_.layout_.servers[s] + (stale ? " (behind the others)" : "");
  }
  throw Error(Errc::server_gone, "buffer '" + buffer_.layout_.name + "': " + op + ": every copy of its stripes on " + where +
                                     " is gone or behind the others");
}

}  // namespace smb::client
