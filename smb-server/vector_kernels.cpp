#include "vector_kernels.hpp"

#include <smb/error.hpp>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace smb::server {

float f16_to_f32_portable(std::uint16_t bits) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in a float
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31)  // infinity, or a NaN (made quiet, as the hardware does)
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13) | (mantissa != 0 ? 0x400000u : 0));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

std::uint16_t f32_to_f16_portable(float value) noexcept {
  const auto u = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u)  // NaN: stays a quiet NaN with the payload's top bits
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  if (magnitude >= 0x47800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65536: infinity
  // Rounds q (with `shift` bits of r below it) to nearest, ties to even.
  auto rounded = [](std::uint32_t q, std::uint32_t rest, std::uint32_t half) {
    return rest > half || (rest == half && (q & 1u) != 0) ? q + 1 : q;
  };
  const std::uint32_t exponent = magnitude >> 23;
  if (exponent < 113) {  // below 2^-14: a subnormal half (or zero) in units of 2^-24
    if (exponent < 102) return sign;  // below 2^-25: rounds to zero
    const std::uint32_t m = (magnitude & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126 - exponent;  // 14..24
    return static_cast<std::uint16_t>(sign | rounded(m >> shift, m & ((1u << shift) - 1), 1u << (shift - 1)));
  }
  // Normal: a carry out of the mantissa moves into the exponent (up to infinity), as it should.
  const std::uint32_t q = ((exponent - 112) << 10) | ((magnitude & 0x7fffffu) >> 13);
  return static_cast<std::uint16_t>(sign | rounded(q, magnitude & 0x1fffu, 0x1000u));
}

#if defined(__FLT16_MANT_DIG__)  // the compiler has _Float16 (GCC 12; clang 15+ on x86)
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
#else
float f16_to_f32(std::uint16_t bits) noexcept { return f16_to_f32_portable(bits); }
std::uint16_t f32_to_f16(float value) noexcept { return f32_to_f16_portable(value); }
#endif

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

// The float loop, once per storage type; T is stored, C computed in. min and
// max pick the stored element itself (exact, payload and sign of zero kept):
// x where x < y (x > y) or x is NaN, else y, so a NaN on either side wins.
template <class T, class C, class Load, class Store>
void run_float(VectorOp op, T* y, const T* x, std::size_t n, C a, Load load, Store store) {
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
    case VectorOp::product:
      for (std::size_t i = 0; i < n; ++i) y[i] = store(load(y[i]) * load(x[i]));
      break;
    case VectorOp::min:
      for (std::size_t i = 0; i < n; ++i) {
        const C yi = load(y[i]), xi = load(x[i]);
        y[i] = xi < yi || std::isnan(xi) ? x[i] : y[i];
      }
      break;
    case VectorOp::max:
      for (std::size_t i = 0; i < n; ++i) {
        const C yi = load(y[i]), xi = load(x[i]);
        y[i] = xi > yi || std::isnan(xi) ? x[i] : y[i];
      }
      break;
    case VectorOp::copy:
      if (y != x) std::memcpy(y, x, n * sizeof(T));
      break;
  }
}

// The integer loop: computed in an unsigned type at least as wide as T (and
// never promoted to int), so overflow wraps instead of being undefined; the
// conversion back keeps the low bits (modular, as C++20 defines it). Only
// min and max compare, and they compare as T, signed or not.
template <class T>
void run_integer(VectorOp op, T* y, const T* x, std::size_t n, std::int64_t alpha) {
  using U = std::conditional_t<(sizeof(T) > 4), std::uint64_t, std::uint32_t>;
  const auto a = static_cast<U>(alpha);
  auto u = [](T v) { return static_cast<U>(v); };
  switch (op) {
    case VectorOp::accumulate:
      for (std::size_t i = 0; i < n; ++i) y[i] = static_cast<T>(u(y[i]) + u(x[i]));
      break;
    case VectorOp::axpy:
      for (std::size_t i = 0; i < n; ++i) y[i] = static_cast<T>(a * u(x[i]) + u(y[i]));
      break;
    case VectorOp::scale:
      for (std::size_t i = 0; i < n; ++i) y[i] = static_cast<T>(a * u(y[i]));
      break;
    case VectorOp::product:
      for (std::size_t i = 0; i < n; ++i) y[i] = static_cast<T>(u(y[i]) * u(x[i]));
      break;
    case VectorOp::min:
      for (std::size_t i = 0; i < n; ++i) y[i] = x[i] < y[i] ? x[i] : y[i];
      break;
    case VectorOp::max:
      for (std::size_t i = 0; i < n; ++i) y[i] = x[i] > y[i] ? x[i] : y[i];
      break;
    case VectorOp::copy:
      if (y != x) std::memcpy(y, x, n * sizeof(T));
      break;
  }
}

template <class T>
void integers(VectorOp op, std::byte* y, const std::byte* x, std::size_t n, std::int64_t alpha) {
  run_integer(op, reinterpret_cast<T*>(y), reinterpret_cast<const T*>(x), n, alpha);
}

// alpha is integral here for integer axpy/scale (apply_vector_op checked);
// for other ops it is unused, so any value maps to 0 without a UB cast.
void apply_serial(VectorOp op, DType type, std::byte* y, const std::byte* x, std::size_t n, double alpha) {
  auto same = [](auto v) { return v; };
  const std::int64_t ia = is_integral_alpha(alpha) ? static_cast<std::int64_t>(alpha) : 0;
  switch (type) {
    case DType::f32:
      return run_float(op, reinterpret_cast<float*>(y), reinterpret_cast<const float*>(x), n,
                       static_cast<float>(alpha), same, same);
    case DType::f64:
      return run_float(op, reinterpret_cast<double*>(y), reinterpret_cast<const double*>(x), n, alpha, same, same);
    case DType::f16:
      return run_float(op, reinterpret_cast<std::uint16_t*>(y), reinterpret_cast<const std::uint16_t*>(x), n,
                       static_cast<float>(alpha), f16_to_f32, f32_to_f16);
    case DType::bf16:
      return run_float(op, reinterpret_cast<std::uint16_t*>(y), reinterpret_cast<const std::uint16_t*>(x), n,
                       static_cast<float>(alpha), bf16_to_f32, f32_to_bf16);
    case DType::u8: return integers<std::uint8_t>(op, y, x, n, ia);
    case DType::i8: return integers<std::int8_t>(op, y, x, n, ia);
    case DType::i16: return integers<std::int16_t>(op, y, x, n, ia);
    case DType::i32: return integers<std::int32_t>(op, y, x, n, ia);
    case DType::i64: return integers<std::int64_t>(op, y, x, n, ia);
  }
}

// Below this, a thread costs more than it saves.
constexpr std::size_t kParallelBytes = 4u << 20;

}  // namespace

bool is_integral_alpha(double alpha) noexcept {
  // [-2^63, 2^63) holds exactly the doubles that convert to int64; NaN and
  // the infinities fail one of the comparisons.
  return alpha == std::trunc(alpha) && alpha >= -0x1p63 && alpha < 0x1p63;
}

bool alpha_allowed(VectorOp op, DType type, double alpha) noexcept {
  return !is_integer(type) || (op != VectorOp::axpy && op != VectorOp::scale) || is_integral_alpha(alpha);
}

void check_alpha(VectorOp op, DType type, double alpha, const std::string& what) {
  if (alpha_allowed(op, type, alpha)) return;
  char text[32];  // the shortest form that reads back as alpha ("0.5", "1e+19", "nan")
  const auto end = std::to_chars(text, text + sizeof text, alpha).ptr;
  throw Error(Errc::invalid_argument, what + ": alpha " + std::string(text, end) +
                                          " must be an integral value within int64 for the integer type " +
                                          dtype_name(type));
}

void apply_vector_op(VectorOp op, DType type, std::byte* y, const std::byte* x, std::size_t count, double alpha) {
  if (!alpha_allowed(op, type, alpha)) check_alpha(op, type, alpha, vector_op_name(op));
  const std::size_t esize = element_size(type);
  // Asked once: hardware_concurrency() reads sysfs each time, which costs
  // more than a small op itself.
  static const std::size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t threads = std::clamp<std::size_t>(count * esize / kParallelBytes, 1, cores);
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
