#pragma once
// Calls on the wire, the same for every transport (transport.hpp): a call is
// CallHeader, then the control frame (frame_length bytes), then the raw
// payload; the server's reply echoes the token. How the bytes travel is the
// transport's business (UCX: an active message; verbs: a SEND into a posted
// receive), what they mean is not.
//
// The frame/payload split happens here, in one place, from bytes a client
// sent, so that no transport trusts a frame length it was told.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace smb::transport {

struct CallHeader {
  std::uint64_t token;         // the client's id for the call (PendingTable), echoed in the reply
  std::uint32_t frame_length;  // the frame's bytes; the payload is what follows it
  std::uint32_t reserved;      // 0
};
static_assert(sizeof(CallHeader) == 16);

struct CallParts {
  std::vector<std::uint8_t> frame;
  std::vector<std::uint8_t> payload;
};

// nullopt when `frame_length` runs past the data.
inline std::optional<CallParts> split_call(std::span<const std::uint8_t> data, std::uint64_t frame_length) {
  if (frame_length > data.size()) return std::nullopt;
  const auto frame = data.first(static_cast<std::size_t>(frame_length));
  const auto payload = data.subspan(static_cast<std::size_t>(frame_length));
  return CallParts{{frame.begin(), frame.end()}, {payload.begin(), payload.end()}};
}

}  // namespace smb::transport
