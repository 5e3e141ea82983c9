#include <smb/vector_ops.hpp>

namespace smb {

std::size_t element_size(DType type) noexcept {
  switch (type) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
  }
  return 0;
}

const char* dtype_name(DType type) noexcept {
  switch (type) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "unknown";
}

const char* vector_op_name(VectorOp op) noexcept {
  switch (op) {
    case VectorOp::accumulate: return "accumulate";
    case VectorOp::axpy: return "axpy";
    case VectorOp::scale: return "scale";
    case VectorOp::copy: return "copy";
  }
  return "unknown";
}

std::optional<DType> parse_dtype(std::string_view name) noexcept {
  for (auto t : {DType::f32, DType::f64, DType::f16, DType::bf16})
    if (name == dtype_name(t)) return t;
  return std::nullopt;
}

std::optional<VectorOp> parse_vector_op(std::string_view name) noexcept {
  for (auto op : {VectorOp::accumulate, VectorOp::axpy, VectorOp::scale, VectorOp::copy})
    if (name == vector_op_name(op)) return op;
  return std::nullopt;
}

}  // namespace smb
