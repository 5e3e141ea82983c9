#include "vector_op.hpp"

#include "progress.hpp"

#include "parallel.hpp"
#include "../common/vector_elements.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

namespace smb::bench {

using tools::element_at;
using tools::filled_elements;

namespace {

VectorOp server_op(Op op) {
  switch (op) {
    case Op::axpy: return VectorOp::axpy;
    case Op::min: return VectorOp::min;
    case Op::max: return VectorOp::max;
    case Op::product: return VectorOp::product;
    default: return VectorOp::accumulate;
  }
}

}  // namespace

PhaseResult run_vector_op(Buffer& buffer, const Options& o) {
  const std::size_t esize = element_size(o.dtype);
  const std::uint64_t block = std::max<std::uint64_t>(o.block / esize, 1) * esize;
  const auto x = filled_elements(o.dtype, static_cast<std::size_t>(std::min(block, o.size) / esize), o.value);
  const VectorOp op = server_op(o.op);
  PhaseResult result;
  result.seconds = run_threads(1, [&](ThreadContext& context) {
    context.start();
    for (std::uint64_t i = 0; i < o.iters && !context.stop; ++i) {
      for (std::uint64_t offset = 0; offset + esize <= o.size; offset += block) {
        const std::uint64_t bytes = std::min(block, o.size / esize * esize - offset);
        const auto begin = std::chrono::steady_clock::now();
        buffer.apply(op, o.dtype, offset, bytes / esize, o.alpha, std::span(x).first(bytes));
        const auto elapsed = std::chrono::steady_clock::now() - begin;
        result.latencies_ns.push_back(
            static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count()));
        ++result.ops;
        result.bytes += bytes;
        progress_add(bytes);
      }
    }
  });
  return result;
}

void zero_elements(Buffer& buffer, const Options& o) {
  buffer.apply(VectorOp::scale, o.dtype, 0, o.size / element_size(o.dtype), 0.0);
}

double expected_value(const Options& o) {
  const double v = o.op == Op::min       ? std::min(0.0, o.value)
                   : o.op == Op::max     ? std::max(0.0, o.value)
                   : o.op == Op::product ? 0.0
                                         : static_cast<double>(o.iters) * o.value * (o.op == Op::axpy ? o.alpha : 1.0);
  // As the element holds it: V rounded to a half type, a sum wrapped around in an integer type.
  std::vector<std::byte> stored(element_size(o.dtype));
  tools::store_element(o.dtype, stored.data(), 0, v);
  return element_at(o.dtype, stored.data(), 0);
}

std::optional<ValueMismatch> check_elements(Buffer& buffer, const Options& o, double expected) {
  const std::size_t esize = element_size(o.dtype);
  const std::uint64_t count = o.size / esize;
  constexpr std::uint64_t chunk = 1u << 18;
  std::vector<std::byte> bytes(static_cast<std::size_t>(std::min(count, chunk) * esize));
  for (std::uint64_t first = 0; first < count; first += chunk) {
    const auto n = static_cast<std::size_t>(std::min(chunk, count - first));
    buffer.read(first * esize, std::span(bytes).first(n * esize));
    for (std::size_t i = 0; i < n; ++i) {
      const double got = element_at(o.dtype, bytes.data(), i);
      if (got != expected) return ValueMismatch{first + i, expected, got};
    }
  }
  return std::nullopt;
}

}  // namespace smb::bench
