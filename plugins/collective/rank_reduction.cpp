#include "rank_reduction.hpp"

#include <smb/error.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace smb::python {
namespace {

using Op = RankOp;

// NumPy's ufuncs, element by element: integers wrap (computed unsigned), a
// NaN wins min and max.
template <typename T, Op R>
void combine_into(std::span<std::byte> out, const std::byte* x) {
  using U = std::make_unsigned_t<std::conditional_t<std::is_integral_v<T>, T, int>>;
  const std::size_t n = out.size() / sizeof(T);
  for (std::size_t i = 0; i < n; ++i) {
    T a, b;
    std::memcpy(&a, out.data() + i * sizeof(T), sizeof(T));
    std::memcpy(&b, x + i * sizeof(T), sizeof(T));
    if constexpr (R == Op::add || R == Op::product) {
      if constexpr (std::is_integral_v<T>)
        a = static_cast<T>(R == Op::add ? static_cast<U>(static_cast<U>(a) + static_cast<U>(b))
                                            : static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
      else
        a = R == Op::add ? a + b : a * b;
    } else {
      bool nan_b = false;
      if constexpr (std::is_floating_point_v<T>) nan_b = !std::isnan(a) && std::isnan(b);
      if (nan_b || (R == Op::min ? b < a : a < b)) a = b;
    }
    std::memcpy(out.data() + i * sizeof(T), &a, sizeof(T));
  }
}

template <typename T>
void combine_typed(Op op, std::span<std::byte> out, const std::byte* x) {
  switch (op) {
    case Op::add: return combine_into<T, Op::add>(out, x);
    case Op::product: return combine_into<T, Op::product>(out, x);
    case Op::min: return combine_into<T, Op::min>(out, x);
    case Op::max: return combine_into<T, Op::max>(out, x);
  }
}

void combine_any(DType type, Op op, std::span<std::byte> out, const std::byte* x) {
  switch (type) {
    case DType::f32: return combine_typed<float>(op, out, x);
    case DType::f64: return combine_typed<double>(op, out, x);
    case DType::u8: return combine_typed<std::uint8_t>(op, out, x);
    case DType::i8: return combine_typed<std::int8_t>(op, out, x);
    case DType::i16: return combine_typed<std::int16_t>(op, out, x);
    case DType::i32: return combine_typed<std::int32_t>(op, out, x);
    case DType::i64: return combine_typed<std::int64_t>(op, out, x);
    default: throw Error(Errc::invalid_argument, "no reduction of this dtype on the ranks");
  }
}

template <typename T>
void scale_typed(std::span<std::byte> data, T factor) {
  const std::size_t n = data.size() / sizeof(T);
  for (std::size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, data.data() + i * sizeof(T), sizeof(T));
    v *= factor;
    std::memcpy(data.data() + i * sizeof(T), &v, sizeof(T));
  }
}

}  // namespace

bool scales_in_place(DType type) { return type == DType::f32 || type == DType::f64; }

void scale_in_place(DType type, std::span<std::byte> data, double factor) {
  switch (type) {
    case DType::f32: return scale_typed<float>(data, static_cast<float>(factor));
    case DType::f64: return scale_typed<double>(data, factor);
    default: throw Error(Errc::invalid_argument, "no scaling of this dtype in its own type");
  }
}

bool reducible_on_ranks(DType type) {
  switch (type) {
    case DType::f32:
    case DType::f64:
    case DType::u8:
    case DType::i8:
    case DType::i16:
    case DType::i32:
    case DType::i64: return true;
    default: return false;
  }
}

RankReduction::RankReduction(DType type, const std::string& op) : type_(type) {
  if (!reducible_on_ranks(type)) throw Error(Errc::invalid_argument, "no reduction of this dtype on the ranks");
  if (op == "sum" || op == "average")
    op_ = Op::add;  // the caller scales an average
  else if (op == "product")
    op_ = Op::product;
  else if (op == "min")
    op_ = Op::min;
  else if (op == "max")
    op_ = Op::max;
  else
    throw Error(Errc::invalid_argument, "unknown reduction '" + op + "'");
}

void RankReduction::combine_into(std::span<std::byte> out, const std::byte* x) const {
  combine_any(type_, op_, out, x);
}

}  // namespace smb::python
