#pragma once
// A client's control connection to one smbd: synchronous request/reply over
// TCP, every call bounded by the client's timeout.
#include "protocol/credential.hpp"
#include "protocol/messages.hpp"

#include <boost/asio.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>

namespace smb::client {

class ControlConnection {
 public:
  // Connects and says hello (smbd serves nothing before it), and answers the
  // server's challenge with `auth` (the shared secret or a credential:
  // protocol/credential.hpp) where it asks for one;
  // the server's answer is kept in hello_reply().
  ControlConnection(std::string peer, std::chrono::milliseconds timeout, const protocol::Body& hello,
                    const protocol::ClientAuth& auth);
  const protocol::Body& hello_reply() const { return hello_reply_; }
  // This connection's session at the server (calls name it: a barrier).
  std::uint64_t session() const { return session_; }
  // Sends one request and returns the reply body; throws smb::Error naming
  // the server and the message (unreachable, gone, timeout, or the server's error).
  protocol::Body call(protocol::MessageType type, const protocol::Body& request);
  // The same for a request the server answers only later (a lock, a barrier):
  // the reply may take `wait` longer than the usual timeout.
  protocol::Body call(protocol::MessageType type, const protocol::Body& request, std::chrono::milliseconds wait);
  const std::string& peer() const { return peer_; }
  // Closed after a timeout or a broken stream: no call can succeed any more.
  bool broken() const { return broken_; }
  // True once the server has closed the connection (or it broke). Never
  // blocks: skips the check while a call is in progress, and checks at most
  // once per millisecond, so the data path may call it per op (meanwhile it
  // says what the last check found).
  bool peer_closed();

 private:
  template <class Start>
  void run_bounded(const std::string& what, std::chrono::milliseconds limit, Start start);

  std::string peer_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_;
  std::uint32_t next_request_ = 1;
  std::atomic<bool> broken_{false};  // set under mutex_; read anywhere
  std::atomic<std::int64_t> last_probe_ns_{0};
  protocol::Body hello_reply_;
  std::uint64_t session_ = 0;
};

}  // namespace smb::client
