#include "server_calls.hpp"

#include <algorithm>

namespace smb::client {

using protocol::MessageType;

ServerCalls::ServerCalls(std::shared_ptr<ClientCore> client, std::string what, std::chrono::milliseconds extra_wait)
    : ServerCalls(std::move(client), [what = std::move(what)] { return what; }, extra_wait) {}

ServerCalls::ServerCalls(std::shared_ptr<ClientCore> client, std::function<std::string()> what,
                         std::chrono::milliseconds extra_wait)
    : state_(std::make_shared<Request::State>()) {
  // The deadline starts when a wait first has to wait (Request::wait); a
  // late-answered request gets its extra time from now.
  if (extra_wait.count() != 0) state_->deadline = std::chrono::steady_clock::now() + client->timeout() + extra_wait;
  state_->client = std::move(client);
  state_->what = std::move(what);
}

ServerCalls::~ServerCalls() {
  if (!state_->completion->done()) state_->client->transport().abandon(*state_->completion);
}

std::size_t ServerCalls::max_payload(ServerLink& link) { return link.channel->caps().max_call_payload; }

void ServerCalls::send(ServerLink& link, MessageType type, transport::Bytes frame, std::span<const std::byte> payload) {
  link.check_alive();
  if (std::find(state_->links.begin(), state_->links.end(), &link) == state_->links.end())
    state_->links.push_back(&link);
  auto& call = calls_.emplace_back(Pending{&link, type, std::move(frame), {}});
  state_->completion->expect();
  link.channel->call(call.frame, payload, &call.reply, state_->completion);
}

void ServerCalls::add(ServerLink& link, MessageType type, protocol::Body body, std::span<const std::byte> payload) {
  send(link, type, protocol::encode_frame(static_cast<std::uint16_t>(type), next_request_id(), body), payload);
}

void ServerCalls::add_vector_call(ServerLink& link, VectorOp op, DType type, std::uint64_t offset, std::uint64_t count,
                                  double alpha, const std::string& name, std::optional<std::string_view> source,
                                  std::uint64_t source_offset, std::span<const std::byte> payload, std::uint64_t order) {
  send(link, MessageType::vector_call,
       protocol::encode_vector_call(next_request_id(), op, type, offset, count, alpha, name, source, source_offset, order),
       payload);
}

std::string ServerCalls::context(const Pending& call) const {
  return "server " + call.link->control->peer() + ": " + protocol::message_name(static_cast<std::uint16_t>(call.type));
}

protocol::Body ServerCalls::decode(const Pending& call) const {
  const std::string context = this->context(call);
  if (call.reply.size() < protocol::kHeaderSize) throw Error(Errc::protocol, context + ": reply shorter than a frame header");
  const auto header =
      protocol::decode_header(std::span<const std::uint8_t, protocol::kHeaderSize>(call.reply.data(), protocol::kHeaderSize));
  if (header.type != (static_cast<std::uint16_t>(call.type) | protocol::kReplyBit))
    throw Error(Errc::protocol, context + ": reply does not match the request");
  auto reply = protocol::decode_body(std::span<const std::uint8_t>(call.reply).subspan(protocol::kHeaderSize));
  protocol::throw_if_error(reply, context);
  return reply;
}

template <class Decode>
auto ServerCalls::finish_with(Decode&& decode) {
  Request(state_).wait();  // its errors carry `what` already
  std::vector<decltype(decode(calls_.front()))> replies;
  replies.reserve(calls_.size());
  try {
    for (const auto& call : calls_) replies.push_back(decode(call));
  } catch (const Error& e) {
    throw Error(e.code(), state_->describe() + ": " + e.what());
  }
  return replies;
}

std::vector<protocol::Body> ServerCalls::finish() {
  return finish_with([this](const Pending& call) { return decode(call); });
}

void ServerCalls::add_version_call(ServerLink& link, protocol::VersionCallKind kind, const std::string& name,
                                   std::uint64_t version, std::chrono::milliseconds timeout) {
  send(link, MessageType::version_call,
       protocol::encode_version_call(next_request_id(), kind, name, version,
                                     static_cast<std::uint64_t>(std::max<std::int64_t>(timeout.count(), 1))),
       {});
}

void ServerCalls::add_barrier_call(ServerLink& link, const std::string& name, std::uint64_t parties,
                                   std::chrono::milliseconds timeout, std::uint64_t session) {
  send(link, MessageType::barrier_call,
       protocol::encode_barrier_call(next_request_id(), name, parties,
                                     static_cast<std::uint64_t>(std::max<std::int64_t>(timeout.count(), 1)), session),
       {});
}

void ServerCalls::add_atomic_call(ServerLink& link, protocol::AtomicKind kind, const std::string& name,
                                  std::uint64_t offset, std::uint64_t operand, std::uint64_t desired,
                                  std::uint64_t order) {
  send(link, MessageType::atomic_call,
       protocol::encode_atomic_call(next_request_id(), kind, name, offset, operand, desired, order), {});
}

protocol::FixedReply ServerCalls::decode_fixed(const Pending& call) const {
  protocol::FixedReply reply;
  try {
    reply = protocol::decode_fixed_reply(call.type, call.reply);
  } catch (const Error& e) {
    throw Error(e.code(), context(call) + ": " + e.what());
  }
  if (reply.code != Errc::ok) throw Error(reply.code, context(call) + ": " + reply.message);
  return reply;
}

std::vector<protocol::FixedReply> ServerCalls::finish_fixed() {
  return finish_with([this](const Pending& call) { return decode_fixed(call); });
}

std::vector<std::uint64_t> ServerCalls::finish_versions() {
  return finish_with([this](const Pending& call) { return decode_fixed(call).version; });
}

}  // namespace smb::client
