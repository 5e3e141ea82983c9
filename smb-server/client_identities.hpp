#pragma once
// Which client each control session belongs to. A libsmb client draws one
// random identity and gives it in the hello of every connection it makes,
// to every server; a session's number means something on one server only.
// A repair uses it to check that every client with a copy open on the
// copy's server was paused through some keeper of the buffer's record
// (smb-client/repair.cpp): a client that holds the record nowhere it can be
// reached cannot be paused, and its writes would miss the rebuilt copy.
#include "registry.hpp"

#include <cstdint>
#include <map>
#include <mutex>

namespace smb::server {

class ClientIdentities {
 public:
  // `id` 0: the session gave none (not a libsmb client: never counted as paused).
  void greeted(SessionId session, std::uint64_t id);
  std::uint64_t of(SessionId session) const;  // 0 where none was given
  void session_closed(SessionId session);

 private:
  mutable std::mutex mutex_;
  std::map<SessionId, std::uint64_t> ids_;
};

}  // namespace smb::server
