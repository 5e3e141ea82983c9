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

protocol::Header call_header(const transport::Bytes& frame) {
  if (frame.size() < protocol::kHeaderSize) throw Error(Errc::protocol, "call frame shorter than a header");
  auto header =
      protocol::decode_header(std::span<const std::uint8_t, protocol::kHeaderSize>(frame.data(), protocol::kHeaderSize));
  if (header.body_length != frame.size() - protocol::kHeaderSize)
    throw Error(Errc::protocol, "call frame length does not match its header");
  if (!served_by_call(header.type))
    throw Error(Errc::protocol, std::string(protocol::message_name(header.type)) +
                                    " is not served over the data path (use the control connection)");
  return header;
}
}  // namespace

// Runs on the transport's thread: vector ops go to the worker pool from
// here, the rest to the io thread, where coordination lives.
void ControlServer::serve_call(transport::Bytes frame, transport::Bytes payload, transport::Respond respond) {
  protocol::Header header;
  try {
    header = call_header(frame);
  } catch (...) {
    respond(protocol::encode_reply(header.type, header.request_id, current_error_reply(header.type)));
    return;
  }
  ReplyFn reply = reply_once([respond, header](protocol::Body r) {
    respond(protocol::encode_reply(header.type, header.request_id, r));
  });
  guarded(header.type, reply, [&] {
    auto body = protocol::decode_body(std::span<const std::uint8_t>(frame).subspan(protocol::kHeaderSize));
    if (header.type == static_cast<std::uint16_t>(MessageType::vector_op))
      return run_vector_op(std::move(body), std::move(payload), reply);
    asio::post(io_, [this, body = std::move(body), reply, type = header.type]() mutable {
      guarded(type, reply, [&] { route(kCallSession, type, std::move(body), {}, reply); });
    });
  });
}

void ControlServer::run_vector_op(protocol::Body request, transport::Bytes payload, ReplyFn reply) {
  asio::post(workers_, [this, request = std::move(request), payload = std::move(payload),
                        reply = std::move(reply)]() mutable {
    auto answer = handler_.apply(request, std::move(payload));  // never throws
    auto name = request.find("name");
    std::string advanced = protocol::is_ok(answer) && name != request.end() && name->is_string()
                               ? name->get<std::string>()
                               : std::string();
    asio::post(io_, [this, answer = std::move(answer), advanced = std::move(advanced), reply] {
      guarded(static_cast<std::uint16_t>(MessageType::vector_op), reply, [&] {
        if (!advanced.empty()) coordination_.version_advanced(advanced);
        reply(answer);
      });
    });
  });
}

}  // namespace smb::server
