#include "wait_connections.hpp"

namespace smb::client {

namespace {
constexpr std::size_t kMaxIdle = 4;  // more idle sockets than this are closed on return
}

WaitConnections::WaitConnections(std::string peer, std::chrono::milliseconds timeout, protocol::Body hello,
                                 protocol::ClientAuth auth)
    : peer_(std::move(peer)), timeout_(timeout), hello_(std::move(hello)), auth_(std::move(auth)) {}

std::shared_ptr<ControlConnection> WaitConnections::acquire() {
  std::unique_ptr<ControlConnection> connection;
  {
    std::lock_guard lock(idle_->mutex);
    // One its server closed (it restarted, or went) would fail the wait as
    // though the server were gone now.
    while (!connection && !idle_->connections.empty()) {
      connection = std::move(idle_->connections.back());
      idle_->connections.pop_back();
      if (connection->peer_closed()) connection.reset();
    }
  }
  if (!connection) connection = std::make_unique<ControlConnection>(peer_, timeout_, hello_, auth_);
  std::weak_ptr<Idle> home = idle_;
  return {connection.release(), [home](ControlConnection* raw) {
            std::unique_ptr<ControlConnection> back(raw);
            auto idle = home.lock();
            if (!idle || back->broken()) return;
            std::lock_guard lock(idle->mutex);
            if (idle->connections.size() < kMaxIdle) idle->connections.push_back(std::move(back));
          }};
}

}  // namespace smb::client
