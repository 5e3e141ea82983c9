#pragma once
// Requests the servers act on -- vector ops, version reads and waits -- sent
// as calls over each server's data channel (transport.hpp), all in flight at
// once.
#include "client_core.hpp"

#include "protocol/messages.hpp"

#include <deque>

namespace smb::client {

class ServerCalls {
 public:
  // `what` prefixes every error; `extra_wait` lengthens the deadline for
  // requests the server answers late (a version wait).
  ServerCalls(std::shared_ptr<ClientCore> client, std::string what,
              std::chrono::milliseconds extra_wait = std::chrono::milliseconds(0));
  // Forgets calls still in flight (after an error), so no reply lands here late.
  ~ServerCalls();
  ServerCalls(const ServerCalls&) = delete;
  ServerCalls& operator=(const ServerCalls&) = delete;
  // The most payload one call to `link` may carry; the caller splits beyond it.
  static std::size_t max_payload(ServerLink& link);
  // Starts one call. `payload` (a vector op's x) stays valid until finish().
  void add(ServerLink& link, protocol::MessageType type, protocol::Body body,
           std::span<const std::byte> payload = {});
  // Waits for every reply, in the order added; throws the first error.
  std::vector<protocol::Body> finish();

 private:
  struct Pending {
    ServerLink* link;
    protocol::MessageType type;
    transport::Bytes frame;
    transport::Bytes reply;
  };
  protocol::Body decode(const Pending& call) const;

  std::shared_ptr<Request::State> state_;
  std::deque<Pending> calls_;  // a deque: replies land in place while more are added
};

}  // namespace smb::client
