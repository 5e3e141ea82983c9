// Calls: the requests clients send over the data path rather than the
// control connection (transport.hpp). They are the requests that carry bulk
// data or wait for the data to change -- vector ops, version reads and
// version waits -- and they run on the same machinery as control requests:
// vector ops on the worker pool, waits in the coordination service.
//
// Calls have no session: nothing they start outlives them except a version
// wait, which ends at its timeout if its client goes.
#include "control_server.hpp"

#include <spdlog/spdlog.h>

namespace smb::server {

namespace asio = boost::asio;
using protocol::MessageType;

namespace {
constexpr SessionId kCallSession = 0;  // control sessions count from 1

bool served_by_call(std::uint16_t type) {
  return type == static_cast<std::uint16_t>(MessageType::vector_op) ||
         type == static_cast<std::uint16_t>(MessageType::get_version) ||
         type == static_cast<std::uint16_t>(MessageType::wait_version);
}
}  // namespace

void ControlServer::serve_call(transport::Bytes frame, transport::Bytes payload, transport::Respond respond) {
  protocol::Header header;
  protocol::Body body;
  try {
    if (frame.size() < protocol::kHeaderSize) throw Error(Errc::protocol, "call frame shorter than a header");
    header = protocol::decode_header(std::span<const std::uint8_t, protocol::kHeaderSize>(frame.data(), protocol::kHeaderSize));
    if (header.body_length != frame.size() - protocol::kHeaderSize)
      throw Error(Errc::protocol, "call frame length does not match its header");
    if (!served_by_call(header.type))
      throw Error(Errc::protocol, std::string(protocol::message_name(header.type)) +
                                      " is not served over the data path (use the control connection)");
    body = protocol::decode_body(std::span<const std::uint8_t>(frame).subspan(protocol::kHeaderSize));
  } catch (const Error& e) {
    respond(protocol::encode_frame(header.type | protocol::kReplyBit, header.request_id,
                                   protocol::error_reply(e.code(), e.what())));
    return;
  }
  auto answer = [respond, header](const protocol::Body& reply) {
    respond(protocol::encode_frame(header.type | protocol::kReplyBit, header.request_id, reply));
  };
  switch (static_cast<MessageType>(header.type)) {
    case MessageType::vector_op:
      return run_vector_op(std::move(body), std::move(payload), answer);
    case MessageType::get_version:
      asio::post(io_, [this, body = std::move(body), answer] {
        answer(handler_.handle(kCallSession, static_cast<std::uint16_t>(MessageType::get_version), body));
      });
      return;
    default:  // wait_version
      asio::post(io_, [this, body = std::move(body), answer, type = header.type] {
        coordination_.handle(kCallSession, type, body, answer);  // answers errors too
      });
      return;
  }
}

void ControlServer::run_vector_op(protocol::Body request, transport::Bytes payload,
                                  std::function<void(protocol::Body)> reply) {
  asio::post(workers_, [this, request = std::move(request), payload = std::move(payload),
                        reply = std::move(reply)]() mutable {
    auto answer = handler_.apply(request, std::move(payload));
    asio::post(io_, [this, answer = std::move(answer), name = request.value("name", std::string()), reply] {
      if (answer.value("ok", false)) coordination_.version_advanced(name);
      reply(answer);
    });
  });
}

}  // namespace smb::server
