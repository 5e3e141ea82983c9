#pragma once
// One client's control connection. It reads frames as their bytes arrive
// (never allocating what a header only announces), enforces the connection's
// deadlines (hello, a started frame), refuses every request before hello,
// and hands each complete frame to ControlServer::serve.
#include "protocol/messages.hpp"
#include "registry.hpp"

#include <boost/asio.hpp>

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace smb::server {

class ControlServer;

class ControlSession : public std::enable_shared_from_this<ControlSession> {
 public:
  ControlSession(ControlServer& server, boost::asio::ip::tcp::socket socket, SessionId id);
  SessionId id() const { return id_; }
  void start();
  // Closes the socket; the pending read then ends the session.
  void close();

 private:
  void read_header();
  void read_body();
  void frame_complete();
  // A coordination reply may come much later: notice a client that dies meanwhile.
  void watch_while_deferred();
  void send(const protocol::Body& reply);
  void send_and_close(const protocol::Body& reply);
  void end(const std::string& why);
  void arm(std::chrono::milliseconds after, std::string why);
  void disarm();

  ControlServer& server_;
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer deadline_;
  boost::asio::steady_timer expiry_;  // a credential's end
  SessionId id_;
  std::string peer_;
  std::string deadline_reason_;
  bool ended_ = false;
  bool greeted_ = false;   // hello succeeded: other requests are served from now on
  // With --auth-token-file: the challenge this session's hello got, and the
  // hello, served once an auth message proves the secret (protocol/auth.hpp).
  protocol::Bytes challenge_;
  std::vector<std::uint8_t> hello_body_;
  // A credential's prefix (protocol/credential.hpp): every name this session
  // uses must start with it. Empty: the shared secret, or none asked for.
  std::string scope_;
  bool deferred_ = false;  // a reply is still to come
  std::array<std::uint8_t, protocol::kHeaderSize> header_{};
  std::size_t header_have_ = 0;
  protocol::Header request_;
  std::vector<std::uint8_t> body_;
  std::vector<std::uint8_t> out_;

  // The hello or auth reply: greets the session when it is ok.
  void greet(std::span<const std::uint8_t> hello);
  void challenge();
  void check_proof();
  // Takes a credential's scope; false (the session refused and closing) when it has expired.
  bool start_scope(const std::string& prefix, std::uint64_t expires);
};

}  // namespace smb::server
