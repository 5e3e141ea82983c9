#include "client_identities.hpp"

namespace smb::server {

void ClientIdentities::greeted(SessionId session, std::uint64_t id) {
  std::lock_guard lock(mutex_);
  if (id == 0)
    ids_.erase(session);
  else
    ids_[session] = id;
}

std::uint64_t ClientIdentities::of(SessionId session) const {
  std::lock_guard lock(mutex_);
  const auto it = ids_.find(session);
  return it == ids_.end() ? 0 : it->second;
}

void ClientIdentities::session_closed(SessionId session) {
  std::lock_guard lock(mutex_);
  ids_.erase(session);
}

}  // namespace smb::server
