#pragma once
// Little-endian fields of our fixed wire layouts (frame headers, vector
// calls), read and written byte by byte so that no layout depends on the
// host's byte order or alignment.
#include <cstdint>

namespace smb::protocol {

inline void put_le(std::uint8_t* out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<std::uint8_t>(value >> (8 * i));
}
inline std::uint64_t get_le(const std::uint8_t* in, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(in[i]) << (8 * i);
  return v;
}

}  // namespace smb::protocol
