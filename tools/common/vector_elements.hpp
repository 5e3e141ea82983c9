#pragma once
// Elements of the four vector-op types as doubles, for tools that fill or
// print buffers (smb-bench, smbctl dump). Half types round to nearest even.
#include <smb/vector_ops.hpp>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace smb::tools {

inline double element_at(DType type, const std::byte* bytes, std::size_t index) {
  const std::byte* p = bytes + index * element_size(type);
  switch (type) {
    case DType::f32: { float v; std::memcpy(&v, p, 4); return v; }
    case DType::f64: { double v; std::memcpy(&v, p, 8); return v; }
    case DType::f16: { _Float16 v; std::memcpy(&v, p, 2); return static_cast<double>(v); }
    case DType::bf16: {
      std::uint16_t b; std::memcpy(&b, p, 2);
      return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
    }
  }
  return 0;
}

inline void store_element(DType type, std::byte* bytes, std::size_t index, double value) {
  std::byte* p = bytes + index * element_size(type);
  switch (type) {
    case DType::f32: { const auto v = static_cast<float>(value); std::memcpy(p, &v, 4); return; }
    case DType::f64: std::memcpy(p, &value, 8); return;
    case DType::f16: { const auto v = static_cast<_Float16>(value); std::memcpy(p, &v, 2); return; }
    case DType::bf16: {
      const auto u = std::bit_cast<std::uint32_t>(static_cast<float>(value));
      const auto b = static_cast<std::uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
      std::memcpy(p, &b, 2);
      return;
    }
  }
}

inline std::vector<std::byte> filled_elements(DType type, std::size_t count, double value) {
  std::vector<std::byte> out(count * element_size(type));
  for (std::size_t i = 0; i < count; ++i) store_element(type, out.data(), i, value);
  return out;
}

}  // namespace smb::tools
