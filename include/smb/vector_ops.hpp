#pragma once
/// @file
/// Server-side vector operations: the memory server's CPU applies them to a
/// region of a buffer on request (the Soft Memory Box's accumulate / axpy /
/// scale), so that workers exchange parameter deltas without reading,
/// updating and writing back whole regions themselves. With min, max and
/// product on every float and integer type, a Horovod-style allreduce can
/// run all its reduce ops through the memory servers.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace smb {

/// Element types (the values are on the wire and in smb.h's enum smb_dtype).
/// - The half types (f16, bf16) are computed in f32 and rounded once (to
///   nearest, ties to even) when stored.
/// - The integer types use exact two's-complement arithmetic that wraps
///   around on overflow, as torch and numpy do (i8 127 + 1 = -128,
///   u8 255 * 2 = 254).
enum class DType : std::uint8_t { f32 = 1, f64 = 2, f16 = 3, bf16 = 4, u8 = 5, i8 = 6, i16 = 7, i32 = 8, i64 = 9 };

/// y is the target region, x the source (data sent with the request or
/// another buffer region), a the scalar alpha. Values are on the wire and in
/// smb.h's enum smb_vector_op.
/// - On integer types, axpy and scale need an alpha that is an integral value
///   within int64 (else the server answers invalid_argument); a*x wraps too.
/// - min and max on floats propagate NaN: if either of y and x is NaN, the
///   result is NaN (as torch.minimum / torch.maximum); where y and x compare
///   equal (+0 and -0) y is kept.
/// - copy is a byte copy on every type.
enum class VectorOp : std::uint8_t {
  accumulate = 1,  ///< y += x
  axpy = 2,        ///< y = a*x + y
  scale = 3,       ///< y = a*y        (no source)
  copy = 4,        ///< y = x
  min = 5,         ///< y = min(y, x)
  max = 6,         ///< y = max(y, x)
  product = 7,     ///< y = y * x
};

std::size_t element_size(DType type) noexcept;  ///< 0 for a value outside the enum
const char* dtype_name(DType type) noexcept;
const char* vector_op_name(VectorOp op) noexcept;
std::optional<DType> parse_dtype(std::string_view name) noexcept;
std::optional<VectorOp> parse_vector_op(std::string_view name) noexcept;
inline bool needs_source(VectorOp op) noexcept { return op != VectorOp::scale; }
inline bool is_integer(DType type) noexcept { return type >= DType::u8 && type <= DType::i64; }

}  // namespace smb
