// Calls: the requests clients send over the data path rather than the
// control connection (transport.hpp). They are the requests that carry bulk
// data or wait for the data to change -- vector ops, version reads and
// version waits -- and they run on the same machinery as control requests:
// vector ops where they arrive or on the worker pool, waits in the
// coordination service. They come as vector_call, version_call,
// barrier_call and atomic_call (a replicated buffer's atomics, ordered like
// its vector ops), whose fixed binary bodies and replies skip MessagePack
// (protocol/fixed_calls.hpp).
//
// Calls have no session: nothing they start outlives them except a version
// wait, which ends at its timeout if its client goes. Which messages come as
// calls is the schema's business (protocol/message_schema.hpp), and the
// routing table refuses the others (message_routes.cpp).
#include "control_server.hpp"

#include "protocol/credential.hpp"
#include "protocol/fixed_calls.hpp"
#include "vector_runs.hpp"
#include "wait_timeout.hpp"

namespace smb::server {

using protocol::MessageType;

namespace {
protocol::Header call_header(const transport::Bytes& frame) {
  if (frame.size() < protocol::kHeaderSize) throw Error(Errc::protocol, "call frame shorter than a header");
  auto header =
      protocol::decode_header(std::span<const std::uint8_t, protocol::kHeaderSize>(frame.data(), protocol::kHeaderSize));
  if (header.body_length != frame.size() - protocol::kHeaderSize)
    throw Error(Errc::protocol, "call frame length does not match its header");
  return header;
}
}  // namespace

// Runs on the transport's thread, and so do the calls (their routes say arrival).
void ControlServer::serve_call(transport::Bytes frame, transport::Bytes payload, std::string_view scope,
                               transport::Respond respond) {
  protocol::Header header;
  try {
    header = call_header(frame);
    route_for(header.type, kCall);  // only the fixed-body calls come this way (message_schema.hpp)
  } catch (...) {
    respond(protocol::encode_reply(header.type, header.request_id, current_error_reply(header.type)));
    return;
  }
  serve_fixed_call(header, std::span<const std::uint8_t>(frame).subspan(protocol::kHeaderSize), std::move(payload),
                   scope, std::move(respond));
}

// The calls with fixed bodies (protocol/fixed_calls.hpp): decoded without
// MessagePack, answered with a fixed reply.
void ControlServer::serve_fixed_call(const protocol::Header& header, std::span<const std::uint8_t> body,
                                     transport::Bytes payload, std::string_view scope, transport::Respond respond) {
  const auto type = static_cast<MessageType>(header.type);
  // Passed on by reference or copy until nothing can throw: a failure
  // below still answers through it.
  const VersionReplyFn reply = [this, respond = std::move(respond), type, id = header.request_id,
                                start = std::chrono::steady_clock::now()](protocol::FixedReply answer) {
    metrics_.request(static_cast<std::uint16_t>(type), answer.code, std::chrono::steady_clock::now() - start);
    respond(protocol::encode_fixed_reply(type, id, answer));
  };
  try {
    if (type == MessageType::vector_call) {
      auto call = protocol::decode_vector_call(body);
      protocol::check_scope(call.name, scope, "vector_call");
      if (call.source) protocol::check_scope(*call.source, scope, "vector_call's source");
      VectorRequest request{std::move(call.name), call.op,     call.type, call.offset, call.count, call.alpha, {},
                            std::move(call.source), call.source_offset, call.order, std::nullopt};
      if (!request.source) request.data = std::move(payload);
      return run_vector_op(services_, header.type, std::move(request), reply);
    }
    if (type == MessageType::atomic_call) {
      auto call = protocol::decode_atomic_call(body);
      protocol::check_scope(call.name, scope, "atomic_call");
      VectorRequest request;
      request.name = std::move(call.name);
      request.offset = call.offset;
      request.order = call.order;
      request.atomic = VectorRequest::Atomic{call.kind, call.operand, call.desired};
      return run_vector_op(services_, header.type, std::move(request), reply);
    }
    if (type == MessageType::barrier_call) {
      auto call = protocol::decode_barrier_call(body);
      protocol::check_scope(call.name, scope, "barrier_call");
      return barriers_.arrive(call.session, call.name, call.parties,
                              wait_timeout(call.timeout_ms, "timeout_ms", "barrier_call"), reply);
    }
    auto call = protocol::decode_version_call(body);
    protocol::check_scope(call.name, scope, "version_call");
    if (call.kind == protocol::VersionCallKind::get) {
      // Answered between ops: where one is being applied, once it ends, so
      // that equal versions before and after a read mean nothing changed
      // during it (Client::save relies on it).
      const auto settled = handler_.settled_version(call.name);
      if (settled.now == settled.after_running) return reply(protocol::FixedReply{Errc::ok, settled.now, {}});
      return versions_.wait(kCallSession, call.name, settled.after_running,
                            wait_timeout(call.timeout_ms, "timeout_ms", "version_call"), reply);
    }
    versions_.wait(kCallSession, call.name, call.version, wait_timeout(call.timeout_ms, "timeout_ms", "version_call"),
                   reply);
  } catch (...) {
    auto error = current_error(header.type);
    reply(protocol::FixedReply{error.code, 0, std::move(error.message)});
  }
}

}  // namespace smb::server
