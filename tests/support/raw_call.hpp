#pragma once
// Data-path calls sent by hand (fixed_calls.hpp), to a real smbd: a control
// session says hello (its ticket admits the channel), then a channel of the
// named transport carries the calls. For the hostile-call tests and the
// smb_test_raw_call helper. It uses the transports' internals (smb_common),
// so it lives beside smb_test_support, which sees only the public API.
#include "protocol/fixed_calls.hpp"
#include "raw_connection.hpp"
#include "transport/transport.hpp"

#include <chrono>
#include <memory>
#include <span>
#include <string>

namespace smb::test {

class RawCallChannel {
 public:
  // Throws std::runtime_error when the hello fails. A server that asks for a
  // secret gets the proof of $SMB_AUTH_TOKEN_FILE's (a secret or a credential).
  RawCallChannel(const std::string& server, const std::string& transport, const std::string& client = "raw-call");

  // Sends one call and returns its fixed reply; throws smb::Error (timeout
  // when no reply came within `timeout`, or the transport's error).
  protocol::FixedReply call(protocol::MessageType type, const protocol::Bytes& frame,
                            std::span<const std::byte> payload = {},
                            std::chrono::milliseconds timeout = std::chrono::seconds(10));

  // The control session that said hello (it keeps the channel admitted).
  RawConnection& control() { return *control_; }
  // Ends that session: the server stops serving the channel.
  void close_control() { control_.reset(); }
  transport::ClientTransport& transport() { return *transport_; }
  transport::Channel& channel() { return *channel_; }

 private:
  std::unique_ptr<RawConnection> control_;
  std::unique_ptr<transport::ClientTransport> transport_;
  std::unique_ptr<transport::Channel> channel_;
};

}  // namespace smb::test
