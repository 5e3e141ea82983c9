// The server's vector-op arithmetic against a straightforward reference, for
// every op and type, including half-precision rounding (computed in f32,
// rounded once) and the multi-threaded split of large regions.
#include <bit>
#include "vector_kernels.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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
  }
  return 0;
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
  }
  return 0;
}

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

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (auto op : {VectorOp::accumulate, VectorOp::axpy, VectorOp::scale, VectorOp::copy})
    for (auto type : {DType::f32, DType::f64, DType::f16, DType::bf16}) out.push_back({op, type});
  return out;
}

std::string case_name(const testing::TestParamInfo<Case>& param_info) {
  return std::string(smb::vector_op_name(param_info.param.op)) + "_" + smb::dtype_name(param_info.param.type);
}

INSTANTIATE_TEST_SUITE_P(AllOpsAndTypes, VectorKernels, testing::ValuesIn(all_cases()), case_name);

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
