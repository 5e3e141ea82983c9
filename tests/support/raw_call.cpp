#include "raw_call.hpp"

#include "transport/registry.hpp"

#include <stdexcept>

namespace smb::test {

RawCallChannel::RawCallChannel(const std::string& server, const std::string& transport, const std::string& client)
    : control_(std::make_unique<RawConnection>(server)) {
  control_->send(msgpack_frame(type_of(MessageType::hello), 1, {{"client", client}, {"transport", transport}}));
  const auto hello = control_->receive();
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
