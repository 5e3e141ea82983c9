#pragma once
// A plain TCP socket to an smbd control port, for sending it bytes that no
// well-behaved client would (garbage, lying headers, half frames) and for
// reading back what the daemon answers. Knows just enough of the frame format
// (16-byte little-endian header, MessagePack body) to build and parse frames
// by hand, independently of the implementation under test; the message
// numbers and the wire version come from the schema (protocol/message_schema.hpp).
#include "protocol/message_schema.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace smb::test {

using RawBytes = std::vector<std::uint8_t>;

inline constexpr std::uint32_t kFrameMagic = protocol::kMagic;
inline constexpr std::uint16_t kReplyBit = 0x8000;
using protocol::MessageType;
constexpr std::uint16_t type_of(MessageType type) { return static_cast<std::uint16_t>(type); }

struct RawHeader {
  std::uint32_t magic = kFrameMagic;
  std::uint16_t version = protocol::kVersion;  // a test of a foreign version sets another
  std::uint16_t type = 0;
  std::uint32_t request_id = 0;
  std::uint32_t body_length = 0;
};

RawBytes encode_raw_header(const RawHeader& header);
// A well-formed frame around any body bytes.
RawBytes raw_frame(std::uint16_t type, std::uint32_t request_id, const RawBytes& body);
// A well-formed frame around a MessagePack map.
RawBytes msgpack_frame(std::uint16_t type, std::uint32_t request_id, const nlohmann::json& body);

struct RawReply {
  RawHeader header;
  nlohmann::json body;  // discarded() when the body is not MessagePack
};

class RawConnection {
 public:
  explicit RawConnection(const std::string& host_port);  // throws std::runtime_error
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  // Says hello as a client of `transport` ("ucx", "verbs"): smbd serves no
  // other request before it. True when the daemon answered ok.
  bool hello(const std::string& transport);
  // False when the peer has already closed the connection.
  bool send(const RawBytes& bytes);
  // One reply frame, or nullopt on EOF, error or timeout.
  std::optional<RawReply> receive(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // True when the peer closes the connection (EOF or reset) within `timeout`.
  bool closed_by_peer(std::chrono::milliseconds timeout = std::chrono::seconds(5));

 private:
  // Reads exactly `length` bytes; false on EOF, error or timeout.
  bool read_exact(std::uint8_t* out, std::size_t length, std::chrono::steady_clock::time_point deadline);
  int fd_ = -1;
};

}  // namespace smb::test
