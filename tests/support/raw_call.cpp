#include "raw_call.hpp"

#include "protocol/credential.hpp"
#include "transport/registry.hpp"

#include <cstdlib>
#include <stdexcept>

namespace smb::test {

RawCallChannel::RawCallChannel(const std::string& server, const std::string& transport, const std::string& client)
    : control_(std::make_unique<RawConnection>(server)) {
  control_->send(msgpack_frame(type_of(MessageType::hello), 1, {{"client", client}, {"transport", transport}}));
  auto hello = control_->receive();
  // A server with a secret: answered from $SMB_AUTH_TOKEN_FILE (a secret or a credential), as libsmb does.
  const char* secret_file = std::getenv("SMB_AUTH_TOKEN_FILE");
  if (hello && hello->body.contains("challenge") && secret_file != nullptr) {
    const auto& challenge = hello->body["challenge"].get_binary();
    const auto auth = protocol::ClientAuth::from_file(secret_file, "SMB_AUTH_TOKEN_FILE");
    control_->send(msgpack_frame(type_of(MessageType::auth), 2,
                                 auth.answer(protocol::Bytes(challenge.begin(), challenge.end()))));
    hello = control_->receive();
  }
  if (!hello || !hello->body.value("ok", false))
    throw std::runtime_error("hello to " + server + " failed: " + (hello ? hello->body.dump() : "no reply"));
  const auto& address = hello->body["address"].get_binary();
  const auto& ticket = hello->body["ticket"].get_binary();
  transport_ = transport::make_client_transport(transport);
  channel_ = transport_->connect(protocol::Bytes(address.begin(), address.end()), server,
                                 protocol::Bytes(ticket.begin(), ticket.end()));
}

protocol::FixedReply RawCallChannel::call(protocol::MessageType type, const protocol::Bytes& frame,
                                          std::span<const std::byte> payload, std::chrono::milliseconds timeout) {
  protocol::Bytes reply;
  auto done = std::make_shared<transport::Completion>();
  done->expect();
  channel_->call(frame, payload, &reply, done);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done->done() && std::chrono::steady_clock::now() < deadline) transport_->progress();
  if (!done->done())
    throw Error(Errc::timeout, std::string(protocol::message_name(type_of(type))) + ": no reply within the timeout");
  done->throw_if_failed();
  return protocol::decode_fixed_reply(type, reply);
}

}  // namespace smb::test
