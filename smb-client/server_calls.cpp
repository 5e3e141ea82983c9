#include "server_calls.hpp"

#include <algorithm>

namespace smb::client {

using protocol::MessageType;

ServerCalls::ServerCalls(std::shared_ptr<ClientCore> client, std::string what, std::chrono::milliseconds extra_wait)
    : state_(std::make_shared<Request::State>()) {
  state_->deadline = std::chrono::steady_clock::now() + client->timeout() + extra_wait;
  state_->client = std::move(client);
  state_->what = std::move(what);
}

ServerCalls::~ServerCalls() {
  if (!state_->completion->done()) state_->client->transport().abandon(*state_->completion);
}

std::size_t ServerCalls::max_payload(ServerLink& link) { return link.channel->caps().max_call_payload; }

void ServerCalls::add(ServerLink& link, MessageType type, protocol::Body body, std::span<const std::byte> payload) {
  link.check_alive();
  if (std::find(state_->links.begin(), state_->links.end(), &link) == state_->links.end())
    state_->links.push_back(&link);
  auto& call = calls_.emplace_back(Pending{&link, type, {}, {}});
  call.frame = protocol::encode_frame(static_cast<std::uint16_t>(type), static_cast<std::uint32_t>(calls_.size()), body);
  state_->completion->expect();
  link.channel->call(call.frame, payload, &call.reply, state_->completion);
}

protocol::Body ServerCalls::decode(const Pending& call) const {
  const std::string context = "server " + call.link->control->peer() + ": " +
                              protocol::message_name(static_cast<std::uint16_t>(call.type));
  if (call.reply.size() < protocol::kHeaderSize) throw Error(Errc::protocol, context + ": reply shorter than a frame header");
  const auto header =
      protocol::decode_header(std::span<const std::uint8_t, protocol::kHeaderSize>(call.reply.data(), protocol::kHeaderSize));
  if (header.type != (static_cast<std::uint16_t>(call.type) | protocol::kReplyBit))
    throw Error(Errc::protocol, context + ": reply does not match the request");
  auto reply = protocol::decode_body(std::span<const std::uint8_t>(call.reply).subspan(protocol::kHeaderSize));
  protocol::throw_if_error(reply, context);
  return reply;
}

std::vector<protocol::Body> ServerCalls::finish() {
  Request(state_).wait();  // its errors carry `what` already
  std::vector<protocol::Body> replies;
  try {
    for (const auto& call : calls_) replies.push_back(decode(call));
  } catch (const Error& e) {
    throw Error(e.code(), state_->what + ": " + e.what());
  }
  return replies;
}

}  // namespace smb::client
