#pragma once
// Elements of the vector-op types as doubles, for tools that fill or print
// buffers (smb-bench, smbctl dump). Half types round to nearest even;
// integer types are also read exactly (integer_at), as a double holds an i64
// only up to 2^53, and stored wrapping around like the servers' arithmetic.
#include <smb/vector_ops.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace smb::tools {

// Every dtype's name, for command-line checks ("f32", ..., "i64").
inline std::vector<std::string> dtype_names() {
  std::vector<std::string> out;
  for (int t = 1; t <= static_cast<int>(DType::i64); ++t) out.emplace_back(dtype_name(static_cast<DType>(t)));
  return out;
}

// An integer element, exactly (u8 fits an int64 too); 0 for a float type.
inline std::int64_t integer_at(DType type, const std::byte* bytes, std::size_t index) {
  const std::byte* p = bytes + index * element_size(type);
  switch (type) {
    case DType::u8: { std::uint8_t v; std::memcpy(&v, p, 1); return v; }
    case DType::i8: { std::int8_t v; std::memcpy(&v, p, 1); return v; }
    case DType::i16: { std::int16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::i32: { std::int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::i64: { std::int64_t v; std::memcpy(&v, p, 8); return v; }
    default: return 0;
  }
}

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
    case DType::u8: case DType::i8: case DType::i16: case DType::i32: case DType::i64:
      return static_cast<double>(integer_at(type, bytes, index));
  }
  return 0;
}

// value truncated toward zero (clamped to int64, NaN as 0), then its low
// bits: the wraparound the servers' integer arithmetic has.
inline void store_integer(DType type, std::byte* p, double value) {
  const auto v = std::isnan(value) ? 0 : static_cast<std::int64_t>(std::clamp(value, -0x1p63, 0x1p63 - 1024));
  const auto bits = static_cast<std::uint64_t>(v);  // little-endian: the low bytes come first
  std::memcpy(p, &bits, element_size(type));
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
    case DType::u8: case DType::i8: case DType::i16: case DType::i32: case DType::i64:
      return store_integer(type, p, value);
  }
}

inline std::vector<std::byte> filled_elements(DType type, std::size_t count, double value) {
  std::vector<std::byte> out(count * element_size(type));
  for (std::size_t i = 0; i < count; ++i) store_element(type, out.data(), i, value);
  return out;
}

}  // namespace smb::tools
