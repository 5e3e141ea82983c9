#include "protocol/fixed_calls.hpp"

#include <cstring>

namespace smb::protocol {

namespace {

constexpr auto kVectorType = static_cast<std::uint16_t>(MessageType::vector_call);
constexpr auto kVersionType = static_cast<std::uint16_t>(MessageType::version_call);
constexpr auto kBarrierType = static_cast<std::uint16_t>(MessageType::barrier_call);
constexpr auto kAtomicType = static_cast<std::uint16_t>(MessageType::atomic_call);

// The fixed part of a reply to `type`: an atomic's carries the old value.
std::size_t reply_fixed_size(MessageType type) {
  return type == MessageType::atomic_call ? sizeof(AtomicReplyBody) : sizeof(FixedReplyBody);
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

// A buffer's, barrier's or segment's name: 1 to `most` bytes.
void check_name_length(std::uint64_t length, const char* call, std::size_t most) {
  if (length == 0 || length > most)
    bad(Errc::invalid_argument, "a name must have 1 to " + std::to_string(most) + " bytes", call);
}

// The whole frame of a call: its fixed part, then the names.
template <class Fixed>
Bytes call_frame(std::uint16_t type, std::uint32_t request_id, const Fixed& fixed, std::string_view name,
                 std::string_view source = {}) {
  Bytes frame = frame_with_body(type, request_id, sizeof(Fixed) + name.size() + source.size());
  std::uint8_t* b = frame.data() + kHeaderSize;
  std::memcpy(b, &fixed, sizeof(Fixed));
  std::memcpy(b + sizeof(Fixed), name.data(), name.size());
  if (!source.empty()) std::memcpy(b + sizeof(Fixed) + name.size(), source.data(), source.size());
  return frame;
}

// A call's fixed part, read back; the body must hold it.
template <class Fixed>
Fixed read_fixed(std::span<const std::uint8_t> body, const char* call) {
  Fixed fixed;
  if (body.size() < sizeof(Fixed))
    bad(Errc::protocol, "body of " + std::to_string(body.size()) + " bytes is shorter than its fixed part", call);
  std::memcpy(&fixed, body.data(), sizeof(Fixed));
  return fixed;
}

void check_names_fill(std::span<const std::uint8_t> body, std::size_t fixed, std::size_t names, const char* call) {
  if (body.size() != fixed + names)
    bad(Errc::protocol, "body of " + std::to_string(body.size()) + " bytes does not match its name length", call);
}

KindAndNameLength kind_and_name(std::uint8_t kind, std::string_view name) {
  return {kind, 0, static_cast<std::uint16_t>(name.size()), 0};
}

// version_call's and atomic_call's first 8 bytes and name, every length and
// reserved field checked.
template <class Fixed>
std::string read_name_after(std::span<const std::uint8_t> body, const Fixed& fixed, const char* call) {
  const KindAndNameLength& head = fixed.head;
  if (head.reserved8 != 0 || head.reserved32 != 0) bad(Errc::protocol, "reserved field is not zero", call);
  check_names_fill(body, sizeof(Fixed), head.name_length, call);
  check_name_length(head.name_length, call, kMaxSegmentNameLength);
  return std::string(reinterpret_cast<const char*>(body.data() + sizeof(Fixed)), head.name_length);
}

std::string_view names_at(std::span<const std::uint8_t> body, std::size_t fixed) {
  return {reinterpret_cast<const char*>(body.data() + fixed), body.size() - fixed};
}

}  // namespace

Bytes encode_vector_call(std::uint32_t request_id, VectorOp op, DType type, std::uint64_t offset, std::uint64_t count,
                         double alpha, std::string_view name, std::optional<std::string_view> source,
                         std::uint64_t source_offset, std::uint64_t order) {
  const std::string_view source_name = source.value_or(std::string_view{});
  check_name_length(name.size(), "vector_call", kMaxSegmentNameLength);
  if (source) check_name_length(source_name.size(), "vector_call", kMaxSegmentNameLength);
  const VectorCallBody fixed{static_cast<std::uint8_t>(op), static_cast<std::uint8_t>(type),
                             static_cast<std::uint16_t>(name.size()), static_cast<std::uint16_t>(source_name.size()),
                             0, offset, count, alpha, source_offset, order};
  return call_frame(kVectorType, request_id, fixed, name, source_name);
}

VectorCall decode_vector_call(std::span<const std::uint8_t> body) {
  const auto fixed = read_fixed<VectorCallBody>(body, "vector_call");
  if (fixed.reserved16 != 0) bad(Errc::protocol, "reserved field is not zero");
  if (body.size() != sizeof fixed + fixed.name_length + fixed.source_length)
    bad(Errc::protocol, "body of " + std::to_string(body.size()) + " bytes does not match its name lengths");
  check_name_length(fixed.name_length, "vector_call", kMaxSegmentNameLength);
  if (fixed.source_length != 0) check_name_length(fixed.source_length, "vector_call", kMaxSegmentNameLength);
  if (fixed.op < 1 || fixed.op > static_cast<unsigned>(VectorOp::product))
    bad(Errc::invalid_argument, "unknown op " + std::to_string(fixed.op));
  if (fixed.dtype < 1 || fixed.dtype > static_cast<unsigned>(DType::i64))
    bad(Errc::invalid_argument, "unknown dtype " + std::to_string(fixed.dtype));
  VectorCall call;
  call.op = static_cast<VectorOp>(fixed.op);
  call.type = static_cast<DType>(fixed.dtype);
  call.offset = fixed.offset;
  call.count = fixed.count;
  call.alpha = fixed.alpha;
  call.source_offset = fixed.source_offset;
  call.order = fixed.order;
  const std::string_view names = names_at(body, sizeof fixed);
  call.name = names.substr(0, fixed.name_length);
  if (fixed.source_length != 0) call.source.emplace(names.substr(fixed.name_length));
  return call;
}

Bytes encode_version_call(std::uint32_t request_id, VersionCallKind kind, std::string_view name,
                          std::uint64_t version, std::uint64_t timeout_ms) {
  check_name_length(name.size(), "version_call", kMaxSegmentNameLength);
  const VersionCallBody fixed{kind_and_name(static_cast<std::uint8_t>(kind), name), version, timeout_ms};
  return call_frame(kVersionType, request_id, fixed, name);
}

VersionCall decode_version_call(std::span<const std::uint8_t> body) {
  constexpr const char* kCall = "version_call";
  const auto fixed = read_fixed<VersionCallBody>(body, kCall);
  auto name = read_name_after(body, fixed, kCall);
  const auto kind = fixed.head.kind;
  if (kind != static_cast<std::uint8_t>(VersionCallKind::get) && kind != static_cast<std::uint8_t>(VersionCallKind::wait))
    bad(Errc::invalid_argument, "unknown kind " + std::to_string(kind), kCall);
  return VersionCall{static_cast<VersionCallKind>(kind), std::move(name), fixed.version, fixed.timeout_ms};
}

Bytes encode_barrier_call(std::uint32_t request_id, std::string_view name, std::uint64_t parties,
                          std::uint64_t timeout_ms, std::uint64_t session) {
  check_name_length(name.size(), "barrier_call", kMaxNameLength);
  const BarrierCallBody fixed{parties, timeout_ms, session, static_cast<std::uint16_t>(name.size()), 0, 0};
  return call_frame(kBarrierType, request_id, fixed, name);
}

BarrierCall decode_barrier_call(std::span<const std::uint8_t> body) {
  constexpr const char* kCall = "barrier_call";
  const auto fixed = read_fixed<BarrierCallBody>(body, kCall);
  if (fixed.reserved16 != 0 || fixed.reserved32 != 0) bad(Errc::protocol, "reserved field is not zero", kCall);
  check_names_fill(body, sizeof fixed, fixed.name_length, kCall);
  check_name_length(fixed.name_length, kCall, kMaxNameLength);
  BarrierCall call{std::string(names_at(body, sizeof fixed)), fixed.parties, fixed.timeout_ms, fixed.session};
  validate_name(call.name);  // it names state the server keeps (the others name buffers that must exist)
  return call;
}

Bytes encode_atomic_call(std::uint32_t request_id, AtomicKind kind, std::string_view name, std::uint64_t offset,
                         std::uint64_t operand, std::uint64_t desired, std::uint64_t order) {
  check_name_length(name.size(), "atomic_call", kMaxSegmentNameLength);
  const AtomicCallBody fixed{kind_and_name(static_cast<std::uint8_t>(kind), name), offset, operand, desired, order};
  return call_frame(kAtomicType, request_id, fixed, name);
}

AtomicCall decode_atomic_call(std::span<const std::uint8_t> body) {
  constexpr const char* kCall = "atomic_call";
  const auto fixed = read_fixed<AtomicCallBody>(body, kCall);
  auto name = read_name_after(body, fixed, kCall);
  const auto kind = fixed.head.kind;
  if (kind != static_cast<std::uint8_t>(AtomicKind::fetch_add) &&
      kind != static_cast<std::uint8_t>(AtomicKind::compare_swap))
    bad(Errc::invalid_argument, "unknown kind " + std::to_string(kind), kCall);
  return AtomicCall{static_cast<AtomicKind>(kind), std::move(name), fixed.offset, fixed.operand, fixed.desired,
                    fixed.order};
}

Bytes encode_fixed_reply(MessageType type, std::uint32_t request_id, const FixedReply& reply) {
  const std::string_view message = cut_message(reply.message);
  const AtomicReplyBody fixed{{static_cast<std::uint32_t>(reply.code), static_cast<std::uint32_t>(message.size()),
                               reply.version},
                              reply.old};
  const std::size_t size = reply_fixed_size(type);  // AtomicReplyBody begins with FixedReplyBody
  Bytes frame = frame_with_body(static_cast<std::uint16_t>(type) | kReplyBit, request_id, size + message.size());
  std::uint8_t* b = frame.data() + kHeaderSize;
  std::memcpy(b, &fixed, size);
  std::memcpy(b + size, message.data(), message.size());
  return frame;
}

FixedReply decode_fixed_reply(MessageType type, std::span<const std::uint8_t> frame) {
  const char* call = message_name(static_cast<std::uint16_t>(type));
  const std::size_t size = reply_fixed_size(type);
  if (frame.size() < kHeaderSize + size) bad(Errc::protocol, "reply shorter than its fixed part", call);
  const auto header = decode_header(frame.first<kHeaderSize>());
  if (header.type != (static_cast<std::uint16_t>(type) | kReplyBit))
    bad(Errc::protocol, "reply does not match the request", call);
  AtomicReplyBody fixed{};
  std::memcpy(&fixed, frame.data() + kHeaderSize, size);
  if (header.body_length != frame.size() - kHeaderSize || header.body_length != size + fixed.reply.message_length)
    bad(Errc::protocol, "reply length does not match its header", call);
  FixedReply reply;
  // A code this build does not know is still a failure.
  const auto code = fixed.reply.errc;
  reply.code = code > static_cast<std::uint32_t>(kLastErrc) ? Errc::internal : static_cast<Errc>(code);
  reply.version = fixed.reply.version;
  reply.old = fixed.old;
  reply.message.assign(reinterpret_cast<const char*>(frame.data() + kHeaderSize + size), fixed.reply.message_length);
  if (reply.code != Errc::ok && reply.message.empty()) reply.message = "unspecified error";
  return reply;
}

}  // namespace smb::protocol
