#include "vector_kernels.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace smb::server {

float f16_to_f32(std::uint16_t bits) noexcept {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof h);
  return static_cast<float>(h);
}

std::uint16_t f32_to_f16(float value) noexcept {
  const auto h = static_cast<_Float16>(value);  // IEEE conversion: round to nearest even
  std::uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

float bf16_to_f32(std::uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

std::uint16_t f32_to_bf16(float value) noexcept {
  const auto u = std::bit_cast<std::uint32_t>(value);
  if (std::isnan(value)) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // stay a (quiet) NaN
  const std::uint32_t rounding = 0x7fff + ((u >> 16) & 1);  // ties to even
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

namespace {

// The element loop, once per storage type; T is stored, C computed in.
template <class T, class C, class Load, class Store>
void run(VectorOp op, T* y, const T* x, std::size_t n, C a, Load load, Store store) {
  switch (op) {
    case VectorOp::accumulate:
      for (std::size_t i = 0; i < n; ++i) y[i] = store(load(y[i]) + load(x[i]));
      break;
    case VectorOp::axpy:
      for (std::size_t i = 0; i < n; ++i) y[i] = store(a * load(x[i]) + load(y[i]));
      break;
    case VectorOp::scale:
      for (std::size_t i = 0; i < n; ++i) y[i] = store(a * load(y[i]));
      break;
    case VectorOp::copy:
      if (y != x) std::memcpy(y, x, n * sizeof(T));
      break;
  }
}

void apply_serial(VectorOp op, DType type, std::byte* y, const std::byte* x, std::size_t n, double alpha) {
  auto same = [](auto v) { return v; };
  switch (type) {
    case DType::f32:
      return run(op, reinterpret_cast<float*>(y), reinterpret_cast<const float*>(x), n,
                 static_cast<float>(alpha), same, same);
    case DType::f64:
      return run(op, reinterpret_cast<double*>(y), reinterpret_cast<const double*>(x), n, alpha, same, same);
    case DType::f16:
      return run(op, reinterpret_cast<std::uint16_t*>(y), reinterpret_cast<const std::uint16_t*>(x), n,
                 static_cast<float>(alpha), f16_to_f32, f32_to_f16);
    case DType::bf16:
      return run(op, reinterpret_cast<std::uint16_t*>(y), reinterpret_cast<const std::uint16_t*>(x), n,
                 static_cast<float>(alpha), bf16_to_f32, f32_to_bf16);
  }
}

// Below this, a thread costs more than it saves.
constexpr std::size_t kParallelBytes = 4u << 20;

}  // namespace

void apply_vector_op(VectorOp op, DType type, std::byte* y, const std::byte* x, std::size_t count, double alpha) {
  const std::size_t esize = element_size(type);
  const std::size_t threads =
      std::clamp<std::size_t>(count * esize / kParallelBytes, 1, std::max(1u, std::thread::hardware_concurrency()));
  if (threads == 1) return apply_serial(op, type, y, x, count, alpha);
  const std::size_t chunk = (count + threads - 1) / threads;
  std::vector<std::jthread> helpers;
  for (std::size_t t = 1; t < threads; ++t) {
    const std::size_t begin = t * chunk;
    if (begin >= count) break;
    const std::size_t n = std::min(chunk, count - begin);
    helpers.emplace_back([=] {
      apply_serial(op, type, y + begin * esize, x == nullptr ? nullptr : x + begin * esize, n, alpha);
    });
  }
  apply_serial(op, type, y, x, std::min(chunk, count), alpha);
}

}  // namespace smb::server
