#pragma once
// Control connections for requests the server answers late -- a lock, a
// barrier -- so that a wait never holds up the link's main control
// connection (create, open, status, closing buffers) or another thread's
// wait. Idle connections are kept for the next wait.
//
// A lock keeps its connection until it is released: the server ties a lock
// to the connection that took it, and frees it at once if that closes.
#include "control_connection.hpp"

#include <memory>
#include <mutex>
#include <vector>

namespace smb::client {

class WaitConnections {
 public:
  // `hello` is what each new connection says first.
  WaitConnections(std::string peer, std::chrono::milliseconds timeout, protocol::Body hello, protocol::ClientAuth auth);
  // An idle connection or a new one; it comes back here when the last copy
  // goes, unless it broke (a timed-out wait closes it).
  std::shared_ptr<ControlConnection> acquire();

 private:
  struct Idle {
    std::mutex mutex;
    std::vector<std::unique_ptr<ControlConnection>> connections;
  };
  std::string peer_;
  std::chrono::milliseconds timeout_;
  protocol::Body hello_;
  protocol::ClientAuth auth_;
  std::shared_ptr<Idle> idle_ = std::make_shared<Idle>();  // outlived by returning connections
};

}  // namespace smb::client
