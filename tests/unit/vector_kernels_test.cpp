// The server's vector-op arithmetic against a straightforward reference, for
// every op and type, including half-precision rounding (computed in f32,
// rounded once), integer wraparound (against exact 128-bit arithmetic), NaN
// in min/max, and the multi-threaded split of large regions.
#include <bit>
#include "vector_kernels.hpp"

#include <smb/error.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

using smb::DType;
using smb::VectorOp;
using namespace smb::server;

// Stores `v` as `type` (round to nearest even) and reads it back as double.
double round_to(DType type, double v) {
  switch (type) {
    case DType::f32: return static_cast<float>(v);
    case DType::f64: return v;
    case DType::f16: return f16_to_f32(f32_to_f16(static_cast<float>(v)));
    case DType::bf16: return bf16_to_f32(f32_to_bf16(static_cast<float>(v)));
    default: return 0;  // integers: IntegerKernels below
  }
}

std::vector<std::byte> encode(DType type, const std::vector<double>& values) {
  std::vector<std::byte> out(values.size() * smb::element_size(type));
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::byte* p = out.data() + i * smb::element_size(type);
    if (type == DType::f32) {
      const auto f = static_cast<float>(values[i]);
      std::memcpy(p, &f, 4);
    } else if (type == DType::f64) {
      std::memcpy(p, &values[i], 8);
    } else {
      const auto f = static_cast<float>(values[i]);
      const std::uint16_t h = type == DType::f16 ? f32_to_f16(f) : f32_to_bf16(f);
      std::memcpy(p, &h, 2);
    }
  }
  return out;
}

double decode(DType type, const std::vector<std::byte>& bytes, std::size_t i) {
  const std::byte* p = bytes.data() + i * smb::element_size(type);
  if (type == DType::f32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  if (type == DType::f64) {
    double d;
    std::memcpy(&d, p, 8);
    return d;
  }
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return type == DType::f16 ? f16_to_f32(h) : bf16_to_f32(h);
}

// The reference: compute in the type's compute precision, round once.
double reference(VectorOp op, DType type, double y, double x, double a) {
  const bool wide = type == DType::f64;
  auto c = [&](double v) { return wide ? v : static_cast<double>(static_cast<float>(v)); };
  switch (op) {
    case VectorOp::accumulate: return round_to(type, c(c(y) + c(x)));
    case VectorOp::axpy: return round_to(type, c(c(c(a) * c(x)) + c(y)));
    case VectorOp::scale: return round_to(type, c(c(a) * c(y)));
    case VectorOp::copy: return x;
    case VectorOp::product: return round_to(type, c(c(y) * c(x)));
    case VectorOp::min: return x < y || std::isnan(x) ? x : y;
    case VectorOp::max: return x > y || std::isnan(x) ? x : y;
  }
  return 0;
}

constexpr VectorOp kAllOps[] = {VectorOp::accumulate, VectorOp::axpy, VectorOp::scale, VectorOp::copy,
                                VectorOp::min,        VectorOp::max,  VectorOp::product};

struct Case {
  VectorOp op;
  DType type;
};

class VectorKernels : public testing::TestWithParam<Case> {};

TEST_P(VectorKernels, MatchesReference) {
  const auto [op, type] = GetParam();
  // Large enough to be split over threads (> 4 MiB of f64), odd length.
  const std::size_t n = type == DType::f64 ? (5u << 20) / 8 + 3 : 1001;
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> dist(-100, 100);
  std::vector<double> y(n), x(n);
  for (auto& v : y) v = round_to(type, dist(rng));
  for (auto& v : x) v = round_to(type, dist(rng));
  const double a = 0.37;
  auto ybytes = encode(type, y);
  const auto xbytes = encode(type, x);
  apply_vector_op(op, type, ybytes.data(), op == VectorOp::scale ? nullptr : xbytes.data(), n, a);
  for (std::size_t i = 0; i < n; ++i) {
    const double want = reference(op, type, y[i], x[i], a);
    ASSERT_EQ(decode(type, ybytes, i), want) << smb::vector_op_name(op) << " " << smb::dtype_name(type)
                                             << " element " << i << ": y=" << y[i] << " x=" << x[i];
  }
}

std::vector<Case> all_cases(std::initializer_list<DType> types) {
  std::vector<Case> out;
  for (auto op : kAllOps)
    for (auto type : types) out.push_back({op, type});
  return out;
}

std::string case_name(const testing::TestParamInfo<Case>& param_info) {
  return std::string(smb::vector_op_name(param_info.param.op)) + "_" + smb::dtype_name(param_info.param.type);
}

INSTANTIATE_TEST_SUITE_P(AllOpsAndTypes, VectorKernels,
                         testing::ValuesIn(all_cases({DType::f32, DType::f64, DType::f16, DType::bf16})), case_name);

// --- Integers: exact, wrapping around like two's complement ---

__extension__ typedef __int128 Wide;  // holds every a*x + y of int64s exactly
__extension__ typedef unsigned __int128 UWide;

// The exact result reduced modulo 2^bits of T: the two's-complement wraparound.
template <class T>
T wrapped(Wide exact) {
  return static_cast<T>(static_cast<UWide>(exact));
}

template <class T>
T integer_reference(VectorOp op, T y, T x, std::int64_t a) {
  switch (op) {
    case VectorOp::accumulate: return wrapped<T>(Wide{y} + Wide{x});
    case VectorOp::axpy: return wrapped<T>(Wide{a} * Wide{x} + Wide{y});
    case VectorOp::scale: return wrapped<T>(Wide{a} * Wide{y});
    case VectorOp::copy: return x;
    case VectorOp::min: return std::min(y, x);
    case VectorOp::max: return std::max(y, x);
    case VectorOp::product: return wrapped<T>(Wide{y} * Wide{x});
  }
  return 0;
}

template <class T>
void check_integers(VectorOp op, DType type) {
  // 8-byte and 1-byte types large enough to be split over threads (> 4 MiB).
  const std::size_t n = sizeof(T) == 8 ? (5u << 20) / 8 + 3 : sizeof(T) == 1 ? (5u << 20) + 1 : 1001;
  std::mt19937_64 rng(7);
  std::vector<T> y(n), x(n);
  // Random bits over the whole range (so sums and products overflow), with
  // the extremes and small values mixed in.
  auto value = [&](std::size_t i) {
    switch (i % 5) {
      case 0: return std::numeric_limits<T>::max();
      case 1: return std::numeric_limits<T>::min();
      case 2: return static_cast<T>(static_cast<int>(rng() % 7) - 3);
      default: return static_cast<T>(rng());
    }
  };
  for (std::size_t i = 0; i < n; ++i) y[i] = value(i);
  for (std::size_t i = 0; i < n; ++i) x[i] = value(i / 5 + i);  // other pairings of kinds
  for (const std::int64_t a : {std::int64_t{-3}, std::numeric_limits<std::int64_t>::min()}) {
    auto got = y;
    apply_vector_op(op, type, reinterpret_cast<std::byte*>(got.data()),
                    op == VectorOp::scale ? nullptr : reinterpret_cast<const std::byte*>(x.data()), n,
                    static_cast<double>(a));
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(got[i], integer_reference(op, y[i], x[i], a))
          << smb::vector_op_name(op) << " " << smb::dtype_name(type) << " alpha " << a << " element " << i
          << ": y=" << +y[i] << " x=" << +x[i];
  }
}

class IntegerKernels : public testing::TestWithParam<Case> {};

TEST_P(IntegerKernels, MatchExactArithmeticModuloTwoToTheBits) {
  const auto [op, type] = GetParam();
  switch (type) {
    case DType::u8: return check_integers<std::uint8_t>(op, type);
    case DType::i8: return check_integers<std::int8_t>(op, type);
    case DType::i16: return check_integers<std::int16_t>(op, type);
    case DType::i32: return check_integers<std::int32_t>(op, type);
    case DType::i64: return check_integers<std::int64_t>(op, type);
    default: FAIL() << "not an integer type";
  }
}

INSTANTIATE_TEST_SUITE_P(AllOpsAndTypes, IntegerKernels,
                         testing::ValuesIn(all_cases({DType::u8, DType::i8, DType::i16, DType::i32, DType::i64})),
                         case_name);

// One element of `type` after op(y, x, alpha).
template <class T>
T one(VectorOp op, DType type, T y, T x, double alpha = 1.0) {
  apply_vector_op(op, type, reinterpret_cast<std::byte*>(&y), reinterpret_cast<const std::byte*>(&x), 1, alpha);
  return y;
}

TEST(IntegerWraparound, LikeTwosComplement) {
  constexpr auto i64_max = std::numeric_limits<std::int64_t>::max();
  constexpr auto i64_min = std::numeric_limits<std::int64_t>::min();
  EXPECT_EQ(one<std::int8_t>(VectorOp::accumulate, DType::i8, 127, 1), -128);
  EXPECT_EQ(one<std::uint8_t>(VectorOp::product, DType::u8, 255, 2), 254);
  EXPECT_EQ(one<std::uint8_t>(VectorOp::accumulate, DType::u8, 255, 1), 0);
  EXPECT_EQ(one<std::int64_t>(VectorOp::accumulate, DType::i64, i64_max, 1), i64_min);
  EXPECT_EQ(one<std::int64_t>(VectorOp::product, DType::i64, i64_min, -1), i64_min);
  EXPECT_EQ(one<std::int32_t>(VectorOp::product, DType::i32, std::numeric_limits<std::int32_t>::min(), -1),
            std::numeric_limits<std::int32_t>::min());
  EXPECT_EQ(one<std::int16_t>(VectorOp::product, DType::i16, -32768, -32768), 0);  // 2^30 keeps no low bits
  EXPECT_EQ(one<std::int16_t>(VectorOp::axpy, DType::i16, 0, 20000, 2.0), -25536);  // 40000 - 65536
  EXPECT_EQ(one<std::uint8_t>(VectorOp::scale, DType::u8, 1, 0, -1.0), 255);
  EXPECT_EQ(one<std::int64_t>(VectorOp::axpy, DType::i64, 1, i64_max, 2.0), -1);  // 2^64 - 2 + 1
  EXPECT_EQ(one<std::int8_t>(VectorOp::min, DType::i8, -1, 1), -1);  // compared signed
  EXPECT_EQ(one<std::uint8_t>(VectorOp::max, DType::u8, 255, 1), 255);  // compared unsigned
}

TEST(IntegerAlpha, AxpyAndScaleRefuseANonIntegralAlpha) {
  for (const double alpha : {1.5, std::nan(""), std::numeric_limits<double>::infinity(), 0x1p63, -0x1p64}) {
    for (const auto op : {VectorOp::axpy, VectorOp::scale}) {
      std::int32_t y = 7;
      const std::int32_t x = 1;
      try {
        apply_vector_op(op, DType::i32, reinterpret_cast<std::byte*>(&y), reinterpret_cast<const std::byte*>(&x), 1,
                        alpha);
        ADD_FAILURE() << smb::vector_op_name(op) << " with alpha " << alpha << " was accepted";
      } catch (const smb::Error& e) {
        EXPECT_EQ(e.code(), smb::Errc::invalid_argument) << e.what();
        EXPECT_NE(std::string(e.what()).find("alpha"), std::string::npos) << e.what();
      }
      EXPECT_EQ(y, 7) << "the target must be left alone";
    }
    EXPECT_FALSE(is_integral_alpha(alpha)) << alpha;
  }
  EXPECT_TRUE(is_integral_alpha(-0x1p63));  // INT64_MIN itself is fine
  EXPECT_TRUE(is_integral_alpha(-2.0));
  // Floats take any alpha; integer ops without alpha ignore it.
  EXPECT_EQ(one<float>(VectorOp::scale, DType::f32, 2.0f, 0.0f, 1.5), 3.0f);
  EXPECT_EQ(one<std::int32_t>(VectorOp::accumulate, DType::i32, 2, 3, 1.5), 5);
}

// --- min/max on floats: NaN on either side wins ---

TEST(FloatMinMax, PropagateNaNOnEveryFloatType) {
  const double nan = std::nan("");
  const std::vector<double> y = {nan, 1, nan, 2, -5}, x = {1, nan, nan, 3, -6};
  for (const auto type : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (const auto op : {VectorOp::min, VectorOp::max}) {
      auto got = encode(type, y);
      const auto xb = encode(type, x);
      apply_vector_op(op, type, got.data(), xb.data(), y.size(), 1.0);
      const char* what = smb::dtype_name(type);
      for (std::size_t i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(decode(type, got, i))) << what << " " << i;
      EXPECT_EQ(decode(type, got, 3), op == VectorOp::min ? 2 : 3) << what;
      EXPECT_EQ(decode(type, got, 4), op == VectorOp::min ? -6 : -5) << what;
    }
  }
}

TEST(FloatMinMax, KeepYOnTies) {
  // +0 and -0 compare equal: y stays, sign and all.
  EXPECT_FALSE(std::signbit(one<float>(VectorOp::min, DType::f32, 0.0f, -0.0f)));
  EXPECT_TRUE(std::signbit(one<double>(VectorOp::max, DType::f64, -0.0, 0.0)));
}

// The integer-arithmetic f16 conversions (builds without _Float16) agree
// with the compiler's, bit for bit: every half, and floats across the range.
TEST(HalfRounding, PortableF16MatchesTheCompilers) {
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const float expected = f16_to_f32(bits), got = f16_to_f32_portable(bits);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got)) << h;
    } else {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(expected)) << std::hex << h;
    }
  }
  auto check = [](std::uint32_t u) {
    const float f = std::bit_cast<float>(u);
    const auto expected = f32_to_f16(f), got = f32_to_f16_portable(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(got))) << std::hex << u;
    } else {
      EXPECT_EQ(got, expected) << "float bits " << std::hex << u;
    }
  };
  for (std::uint64_t u = 0; u <= 0xffffffffu; u += 257) check(static_cast<std::uint32_t>(u));
  // Every tie and its neighbours around the normal/subnormal/overflow edges.
  for (std::uint32_t base : {0x33000000u, 0x33800000u, 0x38800000u, 0x387fe000u, 0x477fe000u, 0x477ff000u, 0x47800000u})
    for (std::uint32_t d = 0; d < 0x4000; ++d) {
      check(base + d);
      check(base - d);
      check((base + d) | 0x80000000u);
    }
}

TEST(HalfRounding, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 lies exactly between two bf16 values (1 and 1 + 2^-7): ties go to even (1).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 0x1p-8f)), 1.0f);
  // 1 + 3*2^-8 lies between 1 + 2^-7 (odd) and 1 + 2^-6 (even): to even.
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

TEST(HalfRounding, F16RoundsToNearestEvenAndSaturatesToInfinity) {
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + 0x1p-11f)), 1.0f);  // tie: to even
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + 3 * 0x1p-11f)), 1.0f + 0x1p-9f);
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(70000.0f))));
}

TEST(HalfRounding, HalfAccumulateRoundsOnceNotPerStep) {
  // bf16 holds 256 and 258 but nothing between: 256 + 1.5*1 = 257.5 in f32,
  // rounded once to 258. (Rounding a*x = 1.5 to bf16 first is exact, so this
  // checks the final rounding is to nearest, not truncation to 256.)
  std::uint16_t y = f32_to_bf16(256.0f), x = f32_to_bf16(1.0f);
  apply_vector_op(VectorOp::axpy, DType::bf16, reinterpret_cast<std::byte*>(&y),
                  reinterpret_cast<const std::byte*>(&x), 1, 1.5);
  EXPECT_EQ(bf16_to_f32(y), 258.0f);  // 257.5 -> nearest representable (256, 258): 258
}

}  // namespace
