#pragma once
// A call's data as every transport receives it (transport.hpp): the control
// frame, then the raw payload. Split here, in one place, from bytes a client
// sent, so that no transport trusts a frame length it was told.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace smb::transport {

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
