#include "protocol/fixed_calls.hpp"

#include "protocol/little_endian.hpp"

#include <bit>
#include <cstring>

namespace smb::protocol {

namespace {

constexpr auto kVectorType = static_cast<std::uint16_t>(MessageType::vector_call);
constexpr auto kVersionType = static_cast<std::uint16_t>(MessageType::version_call);
constexpr auto kBarrierType = static_cast<std::uint16_t>(MessageType::barrier_call);
constexpr auto kAtomicType = static_cast<std::uint16_t>(MessageType::atomic_call);

// The fixed part of a reply to `type`: an atomic's carries the old value.
std::size_t reply_fixed_size(MessageType type) {
  return kFixedReplySize + (type == MessageType::atomic_call ? sizeof(std::uint64_t) : 0);
}

Bytes frame_with_body(std::uint16_t type, std::uint32_t request_id, std::size_t body_length) {
  Bytes frame(kHeaderSize + body_length);
  const auto head = encode_header(Header{kVersion, type, request_id, static_cast<std::uint32_t>(body_length)});
  std::memcpy(frame.data(), head.data(), head.size());
  return frame;
}

std::string_view cut_message(std::string_view message) {
  if (message.size() <= kMaxErrorLength) return message;
  std::size_t cut = kMaxErrorLength;  // at a character boundary
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
  return message.substr(0, cut);
}

[[noreturn]] void bad(Errc code, const std::string& why, const char* call = "vector_call") {
  throw Error(code, std::string(call) + ": " + why);
}

void check_name_length(std::uint64_t length, const char* call, std::size_t most = kMaxNameLength) {
  if (length == 0 || length > most)
    bad(Errc::invalid_argument, "a buffer name must have 1 to " + std::to_string(most) + " bytes", call);
}

// version_call and atomic_call: kind u8 | 0 u8 | name_length u16 | 0 u32,
// their fields, then the segment name at `fixed`.
Bytes kind_and_name_frame(std::uint16_t type, const char* call, std::uint32_t request_id, std::uint8_t kind,
                          std::string_view name, std::size_t fixed) {
  if (name.empty() || name.size() > kMaxSegmentNameLength)
    throw Error(Errc::invalid_argument, std::string(call) + ": a segment name must have 1 to " +
                                            std::to_string(kMaxSegmentNameLength) + " bytes");
  Bytes frame = frame_with_body(type, request_id, fixed + name.size());
  std::uint8_t* b = frame.data() + kHeaderSize;
  put_le(b, kind, 1);
  put_le(b + 1, 0, 1);
  put_le(b + 2, name.size(), 2);
  put_le(b + 4, 0, 4);
  std::memcpy(b + fixed, name.data(), name.size());
  return frame;
}

struct KindAndName {
  std::uint64_t kind = 0;
  std::string name;
};

// The same, read back: every length and reserved field checked.
KindAndName read_kind_and_name(std::span<const std::uint8_t> body, std::size_t fixed, const char* call) {
  if (body.size() < fixed)
    bad(Errc::protocol, "body of " + std::to_string(body.size()) + " bytes is shorter than its fixed part", call);
  const std::uint8_t* b = body.data();
  const auto name_length = get_le(b + 2, 2);
  if (get_le(b + 1, 1) != 0 || get_le(b + 4, 4) != 0) bad(Errc::protocol, "reserved field is not zero", call);
  if (body.size() != fixed + name_length)
    bad(Errc::protocol, "body of " + std::to_string(body.size()) + " bytes does not match its name length", call);
  check_name_length(name_length, call, kMaxSegmentNameLength);
  return {get_le(b, 1), std::string(reinterpret_cast<const char*>(b + fixed), name_length)};
}

}  // namespace

Bytes encode_vector_call(std::uint32_t request_id, VectorOp op, DType type, std::uint64_t offset, std::uint64_t count,
                         double alpha, std::string_view name, std::optional<std::string_view> source,
                         std::uint64_t source_offset, std::uint64_t order) {
  const std::size_t source_length = source ? source->size() : 0;
  if (name.empty() || name.size() > kMaxSegmentNameLength || source_length > kMaxSegmentNameLength)
    throw Error(Errc::invalid_argument, "vector_call: a segment name must have 1 to " +
                                            std::to_string(kMaxSegmentNameLength) + " bytes");
  Bytes frame = frame_with_body(kVectorType, request_id, kVectorCallFixedSize + name.size() + source_length);
  std::uint8_t* b = frame.data() + kHeaderSize;
  put_le(b, static_cast<std::uint8_t>(op), 1);
  put_le(b + 1, static_cast<std::uint8_t>(type), 1);
  put_le(b + 2, name.size(), 2);
  put_le(b + 4, source_length, 2);
  put_le(b + 6, 0, 2);
  put_le(b + 8, offset, 8);
  put_le(b + 16, count, 8);
  put_le(b + 24, std::bit_cast<std::uint64_t>(alpha), 8);
  put_le(b + 32, source_offset, 8);
  put_le(b + 40, order, 8);
  std::memcpy(b + kVectorCallFixedSize, name.data(), name.size());
  if (source_length != 0) std::memcpy(b + kVectorCallFixedSize + name.size(), source->data(), source_length);
  return frame;
}

VectorCall decode_vector_call(std::span<const std::uint8_t> body) {
  if (body.size() < kVectorCallFixedSize)
    bad(Errc::protocol, "body of " + std::to_string(body.size()) + " bytes is shorter than its fixed part");
  const std::uint8_t* b = body.data();
  const auto op = get_le(b, 1);
  const auto type = get_le(b + 1, 1);
  const auto name_length = get_le(b + 2, 2);
  const auto source_length = get_le(b + 4, 2);
  if (get_le(b + 6, 2) != 0) bad(Errc::protocol, "reserved field is not zero");
  if (body.size() != kVectorCallFixedSize + name_length + source_length)
    bad(Errc::protocol, "body of " + std::to_string(body.size()) + " bytes does not match its name lengths");
  check_name_length(name_length, "vector_call", kMaxSegmentNameLength);
  if (source_length != 0) check_name_length(source_length, "vector_call", kMaxSegmentNameLength);
  if (op < 1 || op > static_cast<std::uint64_t>(VectorOp::product)) bad(Errc::invalid_argument, "unknown op " + std::to_string(op));
  if (type < 1 || type > static_cast<std::uint64_t>(DType::i64))
    bad(Errc::invalid_argument, "unknown dtype " + std::to_string(type));
  VectorCall call;
  call.op = static_cast<VectorOp>(op);
  call.type = static_cast<DType>(type);
  call.offset = get_le(b + 8, 8);
  call.count = get_le(b + 16, 8);
  call.alpha = std::bit_cast<double>(get_le(b + 24, 8));
  call.source_offset = get_le(b + 32, 8);
  call.order = get_le(b + 40, 8);
  const char* names = reinterpret_cast<const char*>(b + kVectorCallFixedSize);
  call.name.assign(names, name_length);
  if (source_length != 0) call.source.emplace(names + name_length, source_length);
  return call;
}

Bytes encode_version_call(std::uint32_t request_id, VersionCallKind kind, std::string_view name,
                          std::uint64_t version, std::uint64_t timeout_ms) {
  Bytes frame = kind_and_name_frame(kVersionType, "version_call", request_id, static_cast<std::uint8_t>(kind), name,
                                    kVersionCallFixedSize);
  std::uint8_t* b = frame.data() + kHeaderSize;
  put_le(b + 8, version, 8);
  put_le(b + 16, timeout_ms, 8);
  return frame;
}

VersionCall decode_version_call(std::span<const std::uint8_t> body) {
  constexpr const char* kCall = "version_call";
  auto [kind, name] = read_kind_and_name(body, kVersionCallFixedSize, kCall);
  if (kind != static_cast<std::uint64_t>(VersionCallKind::get) && kind != static_cast<std::uint64_t>(VersionCallKind::wait))
    bad(Errc::invalid_argument, "unknown kind " + std::to_string(kind), kCall);
  VersionCall call;
  call.kind = static_cast<VersionCallKind>(kind);
  call.version = get_le(body.data() + 8, 8);
  call.timeout_ms = get_le(body.data() + 16, 8);
  call.name = std::move(name);
  return call;
}

Bytes encode_barrier_call(std::uint32_t request_id, std::string_view name, std::uint64_t parties,
                          std::uint64_t timeout_ms, std::uint64_t session) {
  if (name.empty() || name.size() > kMaxNameLength)
    throw Error(Errc::invalid_argument, "barrier_call: a name must have 1 to " + std::to_string(kMaxNameLength) +
                                            " bytes");
  Bytes frame = frame_with_body(kBarrierType, request_id, kBarrierCallFixedSize + name.size());
  std::uint8_t* b = frame.data() + kHeaderSize;
  put_le(b, parties, 8);
  put_le(b + 8, timeout_ms, 8);
  put_le(b + 16, session, 8);
  put_le(b + 24, name.size(), 2);
  put_le(b + 26, 0, 6);
  std::memcpy(b + kBarrierCallFixedSize, name.data(), name.size());
  return frame;
}

BarrierCall decode_barrier_call(std::span<const std::uint8_t> body) {
  constexpr const char* kCall = "barrier_call";
  if (body.size() < kBarrierCallFixedSize)
    bad(Errc::protocol, "body of " + std::to_string(body.size()) + " bytes is shorter than its fixed part", kCall);
  const std::uint8_t* b = body.data();
  const auto name_length = get_le(b + 24, 2);
  if (get_le(b + 26, 6) != 0) bad(Errc::protocol, "reserved field is not zero", kCall);
  if (body.size() != kBarrierCallFixedSize + name_length)
    bad(Errc::protocol, "body of " + std::to_string(body.size()) + " bytes does not match its name length", kCall);
  check_name_length(name_length, kCall);
  BarrierCall call;
  call.parties = get_le(b, 8);
  call.timeout_ms = get_le(b + 8, 8);
  call.session = get_le(b + 16, 8);
  call.name.assign(reinterpret_cast<const char*>(b + kBarrierCallFixedSize), name_length);
  validate_name(call.name);  // it names state the server keeps (the others name buffers that must exist)
  return call;
}

Bytes encode_atomic_call(std::uint32_t request_id, AtomicKind kind, std::string_view name, std::uint64_t offset,
                         std::uint64_t operand, std::uint64_t desired, std::uint64_t order) {
  Bytes frame = kind_and_name_frame(kAtomicType, "atomic_call", request_id, static_cast<std::uint8_t>(kind), name,
                                    kAtomicCallFixedSize);
  std::uint8_t* b = frame.data() + kHeaderSize;
  put_le(b + 8, offset, 8);
  put_le(b + 16, operand, 8);
  put_le(b + 24, desired, 8);
  put_le(b + 32, order, 8);
  return frame;
}

AtomicCall decode_atomic_call(std::span<const std::uint8_t> body) {
  constexpr const char* kCall = "atomic_call";
  auto [kind, name] = read_kind_and_name(body, kAtomicCallFixedSize, kCall);
  if (kind != static_cast<std::uint64_t>(AtomicKind::fetch_add) &&
      kind != static_cast<std::uint64_t>(AtomicKind::compare_swap))
    bad(Errc::invalid_argument, "unknown kind " + std::to_string(kind), kCall);
  const std::uint8_t* b = body.data();
  AtomicCall call;
  call.kind = static_cast<AtomicKind>(kind);
  call.offset = get_le(b + 8, 8);
  call.operand = get_le(b + 16, 8);
  call.desired = get_le(b + 24, 8);
  call.order = get_le(b + 32, 8);
  call.name = std::move(name);
  return call;
}

Bytes encode_fixed_reply(MessageType type, std::uint32_t request_id, const FixedReply& reply) {
  const std::string_view message = cut_message(reply.message);
  const std::size_t fixed = reply_fixed_size(type);
  Bytes frame = frame_with_body(static_cast<std::uint16_t>(type) | kReplyBit, request_id, fixed + message.size());
  std::uint8_t* b = frame.data() + kHeaderSize;
  put_le(b, static_cast<std::uint32_t>(reply.code), 4);
  put_le(b + 4, message.size(), 4);
  put_le(b + 8, reply.version, 8);
  if (fixed > kFixedReplySize) put_le(b + kFixedReplySize, reply.old, 8);
  std::memcpy(b + fixed, message.data(), message.size());
  return frame;
}

FixedReply decode_fixed_reply(MessageType type, std::span<const std::uint8_t> frame) {
  const char* call = message_name(static_cast<std::uint16_t>(type));
  const std::size_t fixed = reply_fixed_size(type);
  if (frame.size() < kHeaderSize + fixed) bad(Errc::protocol, "reply shorter than its fixed part", call);
  const auto header = decode_header(frame.first<kHeaderSize>());
  if (header.type != (static_cast<std::uint16_t>(type) | kReplyBit))
    bad(Errc::protocol, "reply does not match the request", call);
  const std::uint8_t* b = frame.data() + kHeaderSize;
  const auto code = get_le(b, 4);
  const auto message_length = get_le(b + 4, 4);
  if (header.body_length != frame.size() - kHeaderSize || header.body_length != fixed + message_length)
    bad(Errc::protocol, "reply length does not match its header", call);
  FixedReply reply;
  // A code this build does not know is still a failure.
  reply.code = code > static_cast<std::uint64_t>(kLastErrc) ? Errc::internal : static_cast<Errc>(code);
  reply.version = get_le(b + 8, 8);
  if (fixed > kFixedReplySize) reply.old = get_le(b + kFixedReplySize, 8);
  reply.message.assign(reinterpret_cast<const char*>(b + fixed), message_length);
  if (reply.code != Errc::ok && reply.message.empty()) reply.message = "unspecified error";
  return reply;
}

}  // namespace smb::protocol
