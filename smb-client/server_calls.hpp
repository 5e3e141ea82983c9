#pragma once
// Requests the servers act on -- vector ops, version reads and waits -- sent
// as calls over each server's data channel (transport.hpp), all in flight at
// once.
#include "client_core.hpp"

#include "protocol/messages.hpp"
#include "protocol/fixed_calls.hpp"

#include <deque>

namespace smb::client {

class ServerCalls {
 public:
  // `what` prefixes every error; `extra_wait` lengthens the deadline for
  // requests the server answers late (a version wait).
  ServerCalls(std::shared_ptr<ClientCore> client, std::string what,
              std::chrono::milliseconds extra_wait = std::chrono::milliseconds(0));
  // `what` is built only when an error needs it (calls on the hot path).
  ServerCalls(std::shared_ptr<ClientCore> client, std::function<std::string()> what,
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
  // Calls with fixed bodies (protocol/fixed_calls.hpp), answered with a
  // version: a vector op, a version read or wait, a barrier (version 0).
  void add_vector_call(ServerLink& link, VectorOp op, DType type, std::uint64_t offset, std::uint64_t count,
                       double alpha, const std::string& name, std::optional<std::string_view> source,
                       std::uint64_t source_offset, std::span<const std::byte> payload, std::uint64_t order = 0);
  void add_version_call(ServerLink& link, protocol::VersionCallKind kind, const std::string& name,
                        std::uint64_t version = 0, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  void add_barrier_call(ServerLink& link, const std::string& name, std::uint64_t parties,
                        std::chrono::milliseconds timeout, std::uint64_t session);
  // An atomic on a replicated buffer's copy, in the order of its vector ops.
  void add_atomic_call(ServerLink& link, protocol::AtomicKind kind, const std::string& name, std::uint64_t offset,
                       std::uint64_t operand, std::uint64_t desired, std::uint64_t order = 0);
  // Waits for every reply, in the order added; throws the first error.
  std::vector<protocol::Body> finish();
  // The same when all calls had fixed bodies: each one's reply (all ok), or
  // only each one's version.
  std::vector<protocol::FixedReply> finish_fixed();
  std::vector<std::uint64_t> finish_versions();

 private:
  struct Pending {
    ServerLink* link;
    protocol::MessageType type;
    transport::Bytes frame;
    transport::Bytes reply;
  };
  void send(ServerLink& link, protocol::MessageType type, transport::Bytes frame, std::span<const std::byte> payload);
  std::uint32_t next_request_id() const { return static_cast<std::uint32_t>(calls_.size() + 1); }
  std::string context(const Pending& call) const;
  protocol::Body decode(const Pending& call) const;
  protocol::FixedReply decode_fixed(const Pending& call) const;  // throws the reply's error
  // Waits, then decodes each reply with `decode`; errors name `what`.
  template <class Decode>
  auto finish_with(Decode&& decode);

  std::shared_ptr<Request::State> state_;
  std::deque<Pending> calls_;  // a deque: replies land in place while more are added
};

}  // namespace smb::client
