// Calls: the requests clients send over the data path rather than the
// control connection (transport.hpp). They are the requests that carry bulk
// data or wait for the data to change -- vector ops, version reads and
// version waits -- and they run on the same machinery as control requests:
// vector ops on the worker pool, waits in the coordination service.
//
// Calls have no session: nothing they start outlives them except a version
// wait, which ends at its timeout if its client goes. Which messages may come
// as calls is the routing table's business (message_routes.cpp).
#include "control_server.hpp"

namespace smb::server {

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

// Runs on the transport's thread; the handler runs where its route says.
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
    const Route& route = route_for(header.type, kCall);
    auto body = protocol::decode_body(std::span<const std::uint8_t>(frame).subspan(protocol::kHeaderSize));
    dispatch(route, Request{kCallSession, header.type, kCall, std::move(body), std::move(payload)}, reply, false);
  });
}

}  // namespace smb::server
