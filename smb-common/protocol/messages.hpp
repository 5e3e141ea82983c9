#pragma once
// Control-plane wire format (TCP, both directions).
//
//   frame  = header (16 bytes, little endian) + body (body_length bytes)
//   header = magic u32 "SMB1" | version u16 | type u16 | request_id u32 | body_length u32
//   body   = a MessagePack map (nlohmann::json), checked field by field on receipt.
//
// Replies carry the request's type with kReplyBit set and the same request_id;
// their body has "ok" and, on failure, "errc" and "error".
#include "protocol/message_schema.hpp"

#include <smb/error.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace smb::protocol {

using Body = nlohmann::json;
using Bytes = std::vector<std::uint8_t>;

// kMagic, kVersion and kWireFingerprint: message_schema.hpp, beside the messages.
inline constexpr std::size_t kHeaderSize = 16;
inline constexpr std::uint32_t kMaxBodySize = 1u << 20;
inline constexpr std::uint16_t kReplyBit = 0x8000;
inline constexpr std::size_t kMaxNameLength = 200;
// Segment names: a buffer's name for its first copy, "NAME#rK" for replica
// K >= 1 ('#' is outside buffer names, so no buffer can take a replica's).
inline constexpr std::size_t kMaxSegmentNameLength = kMaxNameLength + 8;
// Deepest nesting a body may have: ours are a map holding arrays or maps at
// most three levels down. Checked before anything recurses (decode_body).
inline constexpr std::size_t kMaxBodyDepth = 16;
// segment_digest answers at most this many digests (16 bytes each).
inline constexpr std::uint64_t kMaxDigests = 4096;
// Error texts are cut to this many bytes, so that no error reply can grow
// with what a client sent.
inline constexpr std::size_t kMaxErrorLength = 1024;

// MessageType, every message's number, name and path: message_schema.hpp.
// The name of message `type` (its reply bit ignored), "unknown" for a number
// no message has.
const char* message_name(std::uint16_t type);

struct Header {
  std::uint16_t version = kVersion;
  std::uint16_t type = 0;
  std::uint32_t request_id = 0;
  std::uint32_t body_length = 0;
};

std::array<std::uint8_t, kHeaderSize> encode_header(const Header& header);
// Throws Error(protocol) on a bad magic, version or length.
Header decode_header(std::span<const std::uint8_t, kHeaderSize> bytes);
// The same but any version (framing only): for the hello exchange, where a
// foreign version is answered or reported, not dropped.
Header decode_frame_header(std::span<const std::uint8_t, kHeaderSize> bytes);
// What a version mismatch says: both versions and which side to upgrade.
std::string version_mismatch(std::uint16_t client_version, std::uint16_t server_version);

// Throws Error(invalid_argument) when the body exceeds kMaxBodySize.
Bytes encode_frame(std::uint16_t type, std::uint32_t request_id, const Body& body);
// A reply frame for request `type`; never throws: a reply too large for a
// frame goes out as an error reply that says so.
Bytes encode_reply(std::uint16_t type, std::uint32_t request_id, const Body& reply);
// Throws Error(protocol) unless bytes are one MessagePack map nested at most
// kMaxBodyDepth deep. The depth is checked in a SAX pass that stops at the
// first level too deep, so a hostile body cannot exhaust the stack.
Body decode_body(std::span<const std::uint8_t> bytes);

// Field accessors that validate type and presence; `what` names the message.
std::string get_string(const Body& body, const char* field, std::string_view what);
std::uint64_t get_u64(const Body& body, const char* field, std::string_view what);
Bytes get_binary(const Body& body, const char* field, std::string_view what);
bool get_bool(const Body& body, const char* field, std::string_view what);
double get_double(const Body& body, const char* field, std::string_view what);
// A buffer (or lock, barrier) name: a string that passes validate_name.
std::string get_name(const Body& body, const char* field, std::string_view what);

inline Body binary(Bytes bytes) { return Body::binary(std::move(bytes)); }

// Buffer names: 1-200 characters of [A-Za-z0-9._:/@+-_]. Throws invalid_argument.
void validate_name(std::string_view name);

// The segment holding replica `replica` of buffer `name` on a server.
std::string segment_name(std::string_view name, std::uint32_t replica);
// A buffer name, or one with a replica suffix "#r1" to "#r9". Throws invalid_argument.
void validate_segment_name(std::string_view name);
std::string get_segment_name(const Body& body, const char* field, std::string_view what);

Body ok_reply(Body fields = Body::object());
// True for a reply whose "ok" is true.
bool is_ok(const Body& reply);
// `message` is cut to kMaxErrorLength bytes.
Body error_reply(Errc code, const std::string& message);
// The code a reply carries: ok, its errc (internal for one out of range),
// or protocol for a body without a boolean "ok".
Errc reply_errc(const Body& reply) noexcept;
// Throws the Error a reply carries; `context` prefixes its message.
void throw_if_error(const Body& reply, const std::string& context);

}  // namespace smb::protocol
