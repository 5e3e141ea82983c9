#pragma once
// The arithmetic of server-side vector ops (include/smb/vector_ops.hpp):
// plain loops the compiler vectorises (this file's .cpp is built with -O3),
// split over the machine's cores for large regions.
#include <smb/vector_ops.hpp>

#include <cstddef>
#include <string>

namespace smb::server {

// y[i] = op(y[i], x[i], alpha) for i < count. `x` may be null for scale.
// x and y may alias exactly (same address); partial overlap is not allowed.
// Throws what check_alpha throws, before touching y.
void apply_vector_op(VectorOp op, DType type, std::byte* y, const std::byte* x, std::size_t count, double alpha);

// True when alpha is an integral value within int64: what axpy and scale
// take on integer types, as they multiply exactly.
bool is_integral_alpha(double alpha) noexcept;
// Throws Error(invalid_argument), its message starting with `what`, for
// axpy or scale on an integer type with an alpha is_integral_alpha refuses.
// SegmentStore::apply calls it up front, with the buffer's name in `what`.
void check_alpha(VectorOp op, DType type, double alpha, const std::string& what);
// What check_alpha checks, without building an error text.
bool alpha_allowed(VectorOp op, DType type, double alpha) noexcept;

// Half-precision conversions (round to nearest, ties to even), exposed for tests.
float f16_to_f32(std::uint16_t bits) noexcept;
std::uint16_t f32_to_f16(float value) noexcept;
float bf16_to_f32(std::uint16_t bits) noexcept;
std::uint16_t f32_to_bf16(float value) noexcept;
// The same f16 conversions in integer arithmetic, for compilers without
// _Float16 (clang before 15 on x86, as in the fuzz build); tested bit for
// bit against _Float16 where both exist.
float f16_to_f32_portable(std::uint16_t bits) noexcept;
std::uint16_t f32_to_f16_portable(float value) noexcept;

}  // namespace smb::server
