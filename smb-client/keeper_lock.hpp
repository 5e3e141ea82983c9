#pragma once
// One lock request to one of a name's keepers (keeper_lock.cpp takes the
// lock; lock_restorer.cpp takes a lost hold again).
#include "control_connection.hpp"

#include <smb/client.hpp>

#include <chrono>
#include <memory>
#include <string>

namespace smb::client {

enum class KeeperAsk {
  settled_only,  // a grant, or the grace left where the server has just started
  any,           // a grant, waiting as long as it takes
  restore,       // a hold this client has at the other keeper: granted at once, or refused
};

// How long a restore may take: it never waits behind anyone.
inline constexpr std::chrono::milliseconds kRestoreWait{1'000};

struct Asked {
  enum Kind { granted, grace, absent, refused } kind = absent;
  std::uint64_t token = 0;
  std::chrono::milliseconds grace_left{0};
  std::shared_ptr<ControlConnection> connection;  // the one that holds it (granted)
  std::string why;                                // absent, refused: the server's words
};

protocol::Body lock_request(const Lock::State& lock, KeeperAsk ask, std::chrono::milliseconds timeout);
// Throws what is neither a grant, a grace, an absence nor a refused restore
// (a timeout: not granted in time).
Asked ask_keeper(ClientCore& core, const std::string& keeper, const protocol::Body& request,
                 std::chrono::milliseconds wait);

}  // namespace smb::client
