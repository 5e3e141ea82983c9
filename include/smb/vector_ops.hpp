#pragma once
// Server-side vector operations: the memory server's CPU applies them to a
// region of a buffer on request (the Soft Memory Box's accumulate / axpy /
// scale), so that workers exchange parameter deltas without reading,
// updating and writing back whole regions themselves.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace smb {

// Element types. The half types (f16, bf16) are computed in f32 and rounded
// once (to nearest, ties to even) when stored.
enum class DType : std::uint8_t { f32 = 1, f64 = 2, f16 = 3, bf16 = 4 };

// y is the target region, x the source (data sent with the request or
// another buffer region), a the scalar.
enum class VectorOp : std::uint8_t {
  accumulate = 1,  // y += x
  axpy = 2,        // y = a*x + y
  scale = 3,       // y = a*y        (no source)
  copy = 4,        // y = x
};

std::size_t element_size(DType type) noexcept;
const char* dtype_name(DType type) noexcept;
const char* vector_op_name(VectorOp op) noexcept;
std::optional<DType> parse_dtype(std::string_view name) noexcept;
std::optional<VectorOp> parse_vector_op(std::string_view name) noexcept;
inline bool needs_source(VectorOp op) noexcept { return op != VectorOp::scale; }

}  // namespace smb
