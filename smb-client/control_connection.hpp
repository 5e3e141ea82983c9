#pragma once
// A client's control connection to one smbd: synchronous request/reply over
// TCP, every call bounded by the client's timeout.
#include "protocol/messages.hpp"

#include <boost/asio.hpp>

#include <chrono>
#include <mutex>
#include <string>

namespace smb::client {

class ControlConnection {
 public:
  ControlConnection(std::string peer, std::chrono::milliseconds timeout);
  // Sends one request and returns the reply body; throws smb::Error naming
  // the server and the message (unreachable, gone, timeout, or the server's error).
  protocol::Body call(protocol::MessageType type, const protocol::Body& request);
  const std::string& peer() const { return peer_; }

 private:
  template <class Start>
  void run_bounded(const std::string& what, Start start);

  std::string peer_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_;
  std::uint32_t next_request_ = 1;
  bool broken_ = false;
};

}  // namespace smb::client
