#include "protocol/messages.hpp"

#include "protocol/little_endian.hpp"
#include "util/parse.hpp"

#include <cstring>

namespace smb::protocol {
namespace {

[[noreturn]] void bad_field(std::string_view what, const char* field, const char* expected) {
  throw Error(Errc::protocol,
              std::string(what) + ": field '" + field + "' is missing or not " + expected);
}

}  // namespace

const char* message_name(std::uint16_t type) {
  // The names are string literals (message_schema.hpp): null-terminated.
  const MessageInfo* info = message_info(static_cast<std::uint16_t>(type & ~kReplyBit));
  return info != nullptr ? info->name.data() : "unknown";
}

std::array<std::uint8_t, kHeaderSize> encode_header(const Header& h) {
  std::array<std::uint8_t, kHeaderSize> out{};
  put_le(out.data(), kMagic, 4);
  put_le(out.data() + 4, h.version, 2);
  put_le(out.data() + 6, h.type, 2);
  put_le(out.data() + 8, h.request_id, 4);
  put_le(out.data() + 12, h.body_length, 4);
  return out;
}

std::string version_mismatch(std::uint16_t client_version, std::uint16_t server_version) {
  const bool client_older = client_version < server_version;
  return "the client (libsmb) speaks wire version " + std::to_string(client_version) + " and smbd version " +
         std::to_string(server_version) + ": upgrade " +
         (client_older ? "the client to the server's release" : "smbd to the client's release") +
         " (both sides of a fabric must come from one release)";
}

Header decode_header(std::span<const std::uint8_t, kHeaderSize> bytes) {
  Header h = decode_frame_header(bytes);
  if (h.version != kVersion)
    throw Error(Errc::protocol, "control protocol version " + std::to_string(h.version) +
                                    " is not supported (this build speaks version " +
                                    std::to_string(kVersion) + ")");
  return h;
}

Header decode_frame_header(std::span<const std::uint8_t, kHeaderSize> bytes) {
  if (get_le(bytes.data(), 4) != kMagic)
    throw Error(Errc::protocol, "bad frame magic: the peer does not speak the SMB control protocol");
  Header h;
  h.version = static_cast<std::uint16_t>(get_le(bytes.data() + 4, 2));
  h.type = static_cast<std::uint16_t>(get_le(bytes.data() + 6, 2));
  h.request_id = static_cast<std::uint32_t>(get_le(bytes.data() + 8, 4));
  h.body_length = static_cast<std::uint32_t>(get_le(bytes.data() + 12, 4));
  if (h.body_length > kMaxBodySize)
    throw Error(Errc::protocol, "frame body of " + std::to_string(h.body_length) +
                                    " bytes exceeds the limit of " + std::to_string(kMaxBodySize));
  return h;
}

Bytes encode_frame(std::uint16_t type, std::uint32_t request_id, const Body& body) {
  Bytes payload = Body::to_msgpack(body);
  if (payload.size() > kMaxBodySize)
    throw Error(Errc::invalid_argument, std::string("control message ") + message_name(type) +
                                            " is too large (" + std::to_string(payload.size()) +
                                            " bytes)");
  Header h{kVersion, type, request_id, static_cast<std::uint32_t>(payload.size())};
  auto head = encode_header(h);
  Bytes frame(head.begin(), head.end());
  frame.insert(frame.end(), payload.begin(), payload.end());
  return frame;
}

Bytes encode_reply(std::uint16_t type, std::uint32_t request_id, const Body& reply) {
  const auto reply_type = static_cast<std::uint16_t>(type | kReplyBit);
  try {
    return encode_frame(reply_type, request_id, reply);
  } catch (const Error& e) {
    return encode_frame(reply_type, request_id, error_reply(Errc::internal, e.what()));
  }
}

namespace {

// A SAX consumer that builds nothing and only tracks nesting: returning
// false from start_* ends the parse there, before nlohmann's reader recurses
// any deeper.
class DepthCheck : public nlohmann::json_sax<Body> {
 public:
  bool too_deep = false;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return enter(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return leave(); }
  bool start_array(std::size_t) override { return enter(); }
  bool end_array() override { return leave(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  bool enter() {
    if (++depth_ > kMaxBodyDepth) too_deep = true;
    return !too_deep;
  }
  bool leave() {
    --depth_;
    return true;
  }
  std::size_t depth_ = 0;
};

}  // namespace

Body decode_body(std::span<const std::uint8_t> bytes) {
  DepthCheck depth;
  const bool well_formed =
      Body::sax_parse(bytes.begin(), bytes.end(), &depth, nlohmann::json::input_format_t::msgpack, /*strict=*/true);
  if (depth.too_deep)
    throw Error(Errc::protocol, "control message body nests deeper than " + std::to_string(kMaxBodyDepth) + " levels");
  if (!well_formed) throw Error(Errc::protocol, "control message body is not a valid MessagePack map");
  Body body = Body::from_msgpack(bytes.begin(), bytes.end(), /*strict=*/true, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object())
    throw Error(Errc::protocol, "control message body is not a valid MessagePack map");
  return body;
}

std::string get_string(const Body& body, const char* field, std::string_view what) {
  auto it = body.find(field);
  if (it == body.end() || !it->is_string()) bad_field(what, field, "a string");
  return it->get<std::string>();
}

std::uint64_t get_u64(const Body& body, const char* field, std::string_view what) {
  auto it = body.find(field);
  if (it == body.end() || !it->is_number_unsigned()) bad_field(what, field, "an unsigned integer");
  return it->get<std::uint64_t>();
}

Bytes get_binary(const Body& body, const char* field, std::string_view what) {
  auto it = body.find(field);
  if (it == body.end() || !it->is_binary()) bad_field(what, field, "binary");
  const auto& bin = it->get_binary();
  return Bytes(bin.begin(), bin.end());
}

bool get_bool(const Body& body, const char* field, std::string_view what) {
  auto it = body.find(field);
  if (it == body.end() || !it->is_boolean()) bad_field(what, field, "a boolean");
  return it->get<bool>();
}

double get_double(const Body& body, const char* field, std::string_view what) {
  auto it = body.find(field);
  if (it == body.end() || !it->is_number()) bad_field(what, field, "a number");
  return it->get<double>();
}

std::string get_name(const Body& body, const char* field, std::string_view what) {
  auto name = get_string(body, field, what);
  validate_name(name);
  return name;
}

void validate_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength)
    throw Error(Errc::invalid_argument, "buffer name " + util::quoted(name) + " must be 1 to " +
                                            std::to_string(kMaxNameLength) + " characters long");
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::strchr("._:/@+-_", c) != nullptr;
    if (!ok || c == '\0')
      throw Error(Errc::invalid_argument,
                  "buffer name " + util::quoted(name) + " has a character outside [A-Za-z0-9._:/@+-_]");
  }
}

std::string segment_name(std::string_view name, std::uint32_t replica) {
  std::string out(name);
  if (replica != 0) out += "#r" + std::to_string(replica);
  return out;
}

void validate_segment_name(std::string_view name) {
  const auto mark = name.find('#');
  if (mark == std::string_view::npos) return validate_name(name);
  const auto suffix = name.substr(mark);
  if (suffix.size() != 3 || suffix[1] != 'r' || suffix[2] < '1' || suffix[2] > '9')
    throw Error(Errc::invalid_argument,
                "segment name " + util::quoted(name) + " must be a buffer name, or one followed by #r1 to #r9");
  validate_name(name.substr(0, mark));
}

std::string get_segment_name(const Body& body, const char* field, std::string_view what) {
  auto name = get_string(body, field, what);
  validate_segment_name(name);
  return name;
}

Body ok_reply(Body fields) {
  fields["ok"] = true;
  return fields;
}

bool is_ok(const Body& reply) {
  auto ok = reply.find("ok");
  return ok != reply.end() && ok->is_boolean() && ok->get<bool>();
}

Body error_reply(Errc code, const std::string& message) {
  if (message.size() <= kMaxErrorLength)
    return Body{{"ok", false}, {"errc", static_cast<int>(code)}, {"error", message}};
  // Cut at a character boundary: the texts are ASCII apart from what quoted()
  // escapes, but a caller may still have put UTF-8 in.
  std::size_t cut = kMaxErrorLength;
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
  return Body{{"ok", false}, {"errc", static_cast<int>(code)}, {"error", message.substr(0, cut) + "...(cut)"}};
}

Errc reply_errc(const Body& reply) noexcept {
  const auto ok = reply.find("ok");
  if (ok == reply.end() || !ok->is_boolean()) return Errc::protocol;
  if (ok->get<bool>()) return Errc::ok;
  const auto errc = reply.find("errc");
  const int code = errc != reply.end() && errc->is_number_integer() ? errc->get<int>() : 0;
  return code > 0 && code <= static_cast<int>(kLastErrc) ? static_cast<Errc>(code) : Errc::internal;
}

void throw_if_error(const Body& reply, const std::string& context) {
  const Errc code = reply_errc(reply);
  if (code == Errc::ok) return;
  if (code == Errc::protocol && !(reply.contains("ok") && reply["ok"].is_boolean()))
    throw Error(Errc::protocol, context + ": reply has no 'ok' field");
  std::string message = reply.contains("error") && reply["error"].is_string()
                            ? reply["error"].get<std::string>()
                            : std::string("unspecified error");
  throw Error(code, context + ": " + message);
}

}  // namespace smb::protocol
