#pragma once
// Turns one validated control request into its reply. Never throws: every
// failure becomes an error reply that names what was wrong.
#include "protocol/messages.hpp"
#include "registry.hpp"
#include "replies.hpp"

#include <atomic>

namespace smb::server {

struct ServerIdentity {
  std::string address;    // "host:port" this daemon listens on
  std::string transport;  // "ucx"
  transport::Bytes transport_address;
};

class RequestHandler {
 public:
  RequestHandler(Registry& registry, const ServerIdentity& identity, const std::atomic<std::uint32_t>& clients)
      : registry_(registry), identity_(identity), clients_(clients) {}

  protocol::Body handle(SessionId session, std::uint16_t type, const protocol::Body& request);
  // A vector op whose x came as a call's payload (see transport.hpp).
  protocol::Body apply(const protocol::Body& request, transport::Bytes payload);

 private:
  protocol::Body dispatch(SessionId session, protocol::MessageType type, const protocol::Body& request);
  void check_fits(const Layout& layout) const;

  Registry& registry_;
  const ServerIdentity& identity_;
  const std::atomic<std::uint32_t>& clients_;
};

}  // namespace smb::server
