#include <smb/vector_ops.hpp>

namespace smb {

std::size_t element_size(DType type) noexcept {
  switch (type) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::u8: return 1;
    case DType::i8: return 1;
    case DType::i16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}

const char* dtype_name(DType type) noexcept {
  switch (type) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::u8: return "u8";
    case DType::i8: return "i8";
    case DType::i16: return "i16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "unknown";
}

const char* vector_op_name(VectorOp op) noexcept {
  switch (op) {
    case VectorOp::accumulate: return "accumulate";
    case VectorOp::axpy: return "axpy";
    case VectorOp::scale: return "scale";
    case VectorOp::copy: return "copy";
    case VectorOp::min: return "min";
    case VectorOp::max: return "max";
    case VectorOp::product: return "product";
  }
  return "unknown";
}

// The enums are dense from 1, so every name is found by walking the values.
std::optional<DType> parse_dtype(std::string_view name) noexcept {
  for (int t = 1; t <= static_cast<int>(DType::i64); ++t)
    if (name == dtype_name(static_cast<DType>(t))) return static_cast<DType>(t);
  return std::nullopt;
}

std::optional<VectorOp> parse_vector_op(std::string_view name) noexcept {
  for (int op = 1; op <= static_cast<int>(VectorOp::product); ++op)
    if (name == vector_op_name(static_cast<VectorOp>(op))) return static_cast<VectorOp>(op);
  return std::nullopt;
}

}  // namespace smb
