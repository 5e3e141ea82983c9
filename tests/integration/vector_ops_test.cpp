// Server-side vector ops through real smbd processes: results against a
// reference, many concurrent accumulators losing no update, x taken from
// another buffer (the SEASGD delta area), bad requests refused with the
// target left intact, and the shell check `smbctl dump` offers. The
// allreduce ops (min, max, product) and integer types are checked exactly.
#include "data.hpp"
#include "expect_error.hpp"
#include "fabric.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

namespace {

using namespace smb::test;
using smb::DType;
using smb::VectorOp;

constexpr std::uint64_t kUnit = 4096;  // small stripes: every op spans servers

std::vector<std::byte> floats(const std::vector<float>& values) {
  std::vector<std::byte> out(values.size() * 4);
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::vector<float> read_floats(smb::Buffer& buffer, std::uint64_t offset, std::size_t count) {
  std::vector<std::byte> bytes(count * 4);
  buffer.read(offset, bytes);
  std::vector<float> out(count);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// Typed elements as bytes and back, for the integer and f64 cases.
template <class T>
std::vector<std::byte> as_bytes_of(const std::vector<T>& values) {
  std::vector<std::byte> out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

template <class T>
std::vector<T> read_as(smb::Buffer& buffer, std::uint64_t offset, std::size_t count) {
  std::vector<std::byte> bytes(count * sizeof(T));
  buffer.read(offset, bytes);
  std::vector<T> out(count);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

class VectorOpsTest : public FabricTest {
 protected:
  smb::Buffer make(smb::Client& client, const std::string& name, std::size_t floats_count, float fill) {
    smb::BufferOptions o;
    o.stripe_unit = kUnit;
    auto buffer = client.create(name, floats_count * 4, o);
    buffer.write(0, floats(std::vector<float>(floats_count, fill)));
    return buffer;
  }
  template <class T>
  smb::Buffer make_typed(smb::Client& client, const std::string& name, const std::vector<T>& values) {
    smb::BufferOptions o;
    o.stripe_unit = kUnit;
    auto buffer = client.create(name, values.size() * sizeof(T), o);
    buffer.write(0, as_bytes_of(values));
    return buffer;
  }
};

TEST_P(VectorOpsTest, EachOpMatchesItsDefinitionAcrossStripes) {
  auto client = make_client();
  constexpr std::size_t n = 3 * kUnit / 4 + 5;  // crosses every server, odd tail
  auto y = make(client, "y", n, 2.0f);
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 7);
  y.apply(VectorOp::accumulate, DType::f32, 0, n, 1.0, floats(x));    // y = 2 + x
  y.apply(VectorOp::axpy, DType::f32, 0, n, 0.5, floats(x));          // y = 2 + 1.5x
  y.apply(VectorOp::scale, DType::f32, 0, n, 2.0);                    // y = 4 + 3x
  const auto got = read_floats(y, 0, n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 4.0f + 3.0f * x[i]) << "element " << i;
  y.apply(VectorOp::copy, DType::f32, 4 * 10, 3, 1.0, floats({7, 8, 9}));
  EXPECT_EQ(read_floats(y, 4 * 9, 5), (std::vector<float>{4.0f + 3.0f * x[9], 7, 8, 9, 4.0f + 3.0f * x[13]}));
}

TEST_P(VectorOpsTest, ConcurrentAccumulatorsGiveTheExactSum) {
  constexpr int kClients = 4, kIters = 25;
  constexpr std::size_t n = 2 * kUnit;  // 8 KiB of floats per op, over all servers
  {
    auto client = make_client();
    make(client, "sum", n, 0.0f);
  }
  std::vector<std::string> errors(kClients);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c)
    threads.emplace_back([&, c] {
      try {
        auto client = make_client();  // one client (connection set) per thread, as separate workers
        auto buffer = client.open("sum");
        const auto ones = floats(std::vector<float>(n, 1.0f));
        for (int i = 0; i < kIters; ++i) buffer.apply(VectorOp::accumulate, DType::f32, 0, n, 1.0, ones);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(c)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) ASSERT_EQ(e, "");
  auto client = make_client();
  auto buffer = client.open("sum");
  const auto got = read_floats(buffer, 0, n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], float(kClients * kIters)) << "element " << i;
}

// One client, one link per server: large writes in flight while another
// thread's small calls share the endpoint (over shared memory the calls'
// replies once made UCX reconfigure the endpoint under the puts, which then
// stalled for seconds). Everything completes, nothing is mixed up.
TEST_P(VectorOpsTest, CallsBesideLargeWritesOnOneClientBothComplete) {
  constexpr std::size_t kBig = 4 << 20, n = 2 * kUnit;
  constexpr int kWrites = 20, kCalls = 400;
  auto client = make_client();
  auto big = client.create("big", kBig);
  make(client, "calls", n, 0.0f);
  auto calls = client.open("calls");
  const auto data = pattern_bytes(0, kBig);
  std::string write_error;
  std::thread writer([&] {
    try {
      for (int i = 0; i < kWrites; ++i) big.write(0, data);
    } catch (const std::exception& e) {
      write_error = e.what();
    }
  });
  const auto ones = floats(std::vector<float>(n, 1.0f));
  std::string call_error;
  try {
    for (int i = 0; i < kCalls; ++i) calls.apply(VectorOp::accumulate, DType::f32, 0, n, 1.0, ones);
  } catch (const std::exception& e) {
    call_error = e.what();
  }
  writer.join();
  ASSERT_EQ(write_error, "");
  ASSERT_EQ(call_error, "");
  ByteVec back(kBig);
  big.read(0, back);
  EXPECT_TRUE(same_bytes(data, back));
  const auto got = read_floats(calls, 0, n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], float(kCalls)) << "element " << i;
}

// Operands of a MiB and more per server travel apart from their call's
// frame on some transports (UCX: by rendezvous, the frame in the message's
// header; am_wire.hpp): every element lands where its frame says, from
// several clients at once, with odd offsets and counts.
TEST_P(VectorOpsTest, LargeOperandsLandWhereTheirFrameSays) {
  constexpr std::size_t n = (3 << 20) / 4 + 5;  // 3 MiB and a bit, default 1 MiB stripes
  constexpr std::size_t kOffset = 3, kCount = n - 7;
  constexpr int kClients = 2, kIters = 3;
  {
    auto client = make_client();
    auto sum = client.create("big-sum", n * 4);
    sum.write(0, floats(std::vector<float>(n, 1.0f)));
  }
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kClients);
  for (int c = 0; c < kClients; ++c)
    threads.emplace_back([&, c] {
      try {
        auto client = make_client();
        auto sum = client.open("big-sum");
        std::vector<float> x(kCount);
        for (std::size_t i = 0; i < kCount; ++i) x[i] = static_cast<float>((i % 1000) * (c + 1));
        for (int k = 0; k < kIters; ++k) sum.apply(VectorOp::axpy, DType::f32, kOffset * 4, kCount, 2.0, floats(x));
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(c)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) ASSERT_EQ(e, "");
  auto client = make_client();
  auto sum = client.open("big-sum");
  const auto got = read_floats(sum, 0, n);
  for (std::size_t i = 0; i < n; ++i) {
    const bool inside = i >= kOffset && i < kOffset + kCount;
    // 2 x kIters x (1 + 2) x (i - kOffset) % 1000 added to the 1 each started at
    const float want = inside ? 1.0f + 2.0f * kIters * 3.0f * static_cast<float>((i - kOffset) % 1000) : 1.0f;
    ASSERT_EQ(got[i], want) << "element " << i;
  }
}

TEST_P(VectorOpsTest, SourceFromAnotherBufferLikeADeltaArea) {
  auto client = make_client();
  constexpr std::size_t n = 3 * kUnit / 4;
  auto global = make(client, "global", n, 10.0f);
  auto delta = make(client, "delta", n, 0.0f);
  std::vector<float> d(n);
  for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<float>(i);
  delta.write(0, floats(d));  // one-sided write of the delta, then the server adds it in
  global.apply_from(VectorOp::axpy, DType::f32, 0, n, 0.5, delta, 0);
  const auto got = read_floats(global, 0, n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 10.0f + 0.5f * d[i]) << "element " << i;
}

TEST_P(VectorOpsTest, HalfTypesRoundOnce) {
  auto client = make_client();
  smb::BufferOptions o;
  o.stripe_unit = kUnit;
  auto y = client.create("half", 2 * 8, o);
  const std::uint16_t bf16_256 = 0x4380;  // 256.0 in bf16
  std::vector<std::uint16_t> init(8, bf16_256);
  std::vector<std::byte> bytes(16);
  std::memcpy(bytes.data(), init.data(), 16);
  y.write(0, bytes);
  const std::uint16_t one = 0x3f80;  // 1.0
  std::vector<std::uint16_t> x(8, one);
  std::vector<std::byte> xb(16);
  std::memcpy(xb.data(), x.data(), 16);
  y.apply(VectorOp::axpy, DType::bf16, 0, 8, 1.5, xb);  // 257.5 -> 258 (0x4381)
  y.read(0, bytes);
  std::memcpy(init.data(), bytes.data(), 16);
  for (auto v : init) EXPECT_EQ(v, 0x4381);
}

TEST_P(VectorOpsTest, BadRequestsAreRefusedAndLeaveTheTargetIntact) {
  auto client = make_client();
  constexpr std::size_t n = 1024;
  auto y = make(client, "target", n, 5.0f);
  auto ones = floats(std::vector<float>(n, 1.0f));
  expect_errc(smb::Errc::out_of_range, [&] { y.apply(VectorOp::accumulate, DType::f32, 4, n, 1.0, ones); },
              "past the end");
  expect_errc(smb::Errc::invalid_argument, [&] { y.apply(VectorOp::accumulate, DType::f32, 2, 4, 1.0, ones); },
              "misaligned offset");
  expect_errc(smb::Errc::invalid_argument,
              [&] { y.apply(VectorOp::accumulate, DType::f32, 0, 8, 1.0, std::span(ones).first(12)); },
              "x shorter than count");
  smb::BufferOptions other;
  other.stripe_unit = 2 * kUnit;
  auto odd = client.create("odd-stripes", n * 4, other);
  expect_errc(smb::Errc::invalid_argument, [&] { y.apply_from(VectorOp::accumulate, DType::f32, 0, 4, 1.0, odd, 0); },
              "source striped differently");
  EXPECT_EQ(read_floats(y, 0, n), std::vector<float>(n, 5.0f));
}

TEST_P(VectorOpsTest, ProcessesAccumulatingShowKTimesIInEveryElementViaSmbctlDump) {
  const auto init = run_bench({"--op", "accumulate", "--name", "k", "--size", "64K", "--value", "0", "--stripe-unit", "4K"});
  ASSERT_TRUE(init.status.success()) << init.describe();
  constexpr int kProcs = 3, kIters = 4;
  std::vector<std::thread> procs;
  std::vector<ToolResult> results(kProcs);
  for (int p = 0; p < kProcs; ++p)
    procs.emplace_back([&, p] {
      results[static_cast<std::size_t>(p)] = run_bench(
          {"--op", "accumulate", "--name", "k", "--size", "64K", "--value", "1", "--iters", std::to_string(kIters)});
    });
  for (auto& t : procs) t.join();
  for (const auto& r : results) ASSERT_TRUE(r.status.success()) << r.describe();
  const auto dump = run_smbctl({"dump", "k", "--dtype", "f32", "--json"});
  ASSERT_TRUE(dump.status.success()) << dump.describe();
  const auto doc = nlohmann::json::parse(dump.out);
  ASSERT_EQ(doc["values"].size(), 16384u);
  for (const auto& v : doc["values"]) ASSERT_EQ(v.get<double>(), double(kProcs * kIters));
}

// min, max and product as an allreduce runs them: y reduced with x on the
// servers, across stripes of every server, with NaN winning min and max.
TEST_P(VectorOpsTest, MinMaxProductOnFloatsAcrossStripes) {
  auto client = make_client();
  constexpr std::size_t n = 3 * kUnit / 8 + 5;  // f64: crosses every server, odd tail
  const double nan = std::nan("");
  std::vector<double> y0(n), x(n);
  for (std::size_t i = 0; i < n; ++i) {
    y0[i] = static_cast<double>(i % 11) - 5;
    x[i] = i % 97 == 0 ? nan : static_cast<double>(i % 7) - 3;
  }
  y0[1] = nan;
  for (const auto op : {VectorOp::min, VectorOp::max, VectorOp::product}) {
    const std::string name = std::string("f-") + smb::vector_op_name(op);
    auto y = make_typed(client, name, y0);
    y.apply(op, DType::f64, 0, n, 1.0, as_bytes_of(x));
    const auto got = read_as<double>(y, 0, n);
    for (std::size_t i = 0; i < n; ++i) {
      if (std::isnan(y0[i]) || std::isnan(x[i])) {
        ASSERT_TRUE(std::isnan(got[i])) << name << " element " << i;
        continue;
      }
      const double want = op == VectorOp::min   ? std::min(y0[i], x[i])
                          : op == VectorOp::max ? std::max(y0[i], x[i])
                                                : y0[i] * x[i];
      ASSERT_EQ(got[i], want) << name << " element " << i;
    }
  }
}

// The integer types through the servers: exact past 2^53 (where a float
// would round), wrapping around at the type's range, min/max compared signed.
TEST_P(VectorOpsTest, IntegerOpsAreExactAndWrapAround) {
  auto client = make_client();
  using I64 = std::numeric_limits<std::int64_t>;
  constexpr std::size_t n = 3 * kUnit / 8 + 5;
  std::vector<std::int64_t> y0(n), x(n);
  for (std::size_t i = 0; i < n; ++i) {
    y0[i] = (std::int64_t{1} << 60) + static_cast<std::int64_t>(i);
    x[i] = static_cast<std::int64_t>(i % 9) - 4;
  }
  y0[0] = I64::max();  // + x[0] = -4 stays; the next one overflows
  y0[1] = I64::max();
  x[1] = 1;
  auto sum = make_typed(client, "i64-sum", y0);
  sum.apply(VectorOp::accumulate, DType::i64, 0, n, 1.0, as_bytes_of(x));
  auto got = read_as<std::int64_t>(sum, 0, n);
  EXPECT_EQ(got[0], I64::max() - 4);
  EXPECT_EQ(got[1], I64::min());
  for (std::size_t i = 2; i < n; ++i) ASSERT_EQ(got[i], y0[i] + x[i]) << "element " << i;

  for (const auto op : {VectorOp::min, VectorOp::max, VectorOp::product}) {
    auto y = make_typed(client, std::string("i64-") + smb::vector_op_name(op), x);  // y = x - 4..4
    y.apply(op, DType::i64, 0, n, 1.0, as_bytes_of(y0));
    got = read_as<std::int64_t>(y, 0, n);
    for (std::size_t i = 2; i < n; ++i) {
      const std::int64_t want = op == VectorOp::min   ? std::min(x[i], y0[i])
                                : op == VectorOp::max ? std::max(x[i], y0[i])
                                                      : x[i] * y0[i];  // |x| <= 4: within int64
      ASSERT_EQ(got[i], want) << smb::vector_op_name(op) << " element " << i;
    }
  }

  // i32: accumulate and product wrap; axpy and scale take an integral alpha.
  constexpr std::size_t m = 3 * kUnit / 4 + 3;
  std::vector<std::int32_t> a0(m), b(m);
  for (std::size_t i = 0; i < m; ++i) {
    a0[i] = static_cast<std::int32_t>(i) - 1000;
    b[i] = 3;
  }
  a0[0] = std::numeric_limits<std::int32_t>::max();
  auto a = make_typed(client, "i32", a0);
  a.apply(VectorOp::accumulate, DType::i32, 0, m, 1.0, as_bytes_of(b));  // a0 + 3
  a.apply(VectorOp::axpy, DType::i32, 0, m, -2.0, as_bytes_of(b));      // a0 - 3
  a.apply(VectorOp::scale, DType::i32, 0, m, 3.0);                      // 3 a0 - 9
  const auto got32 = read_as<std::int32_t>(a, 0, m);
  EXPECT_EQ(got32[0], std::numeric_limits<std::int32_t>::max() - 11);  // 3 (2^31 - 4) mod 2^32
  for (std::size_t i = 1; i < m; ++i) ASSERT_EQ(got32[i], 3 * a0[i] - 9) << "element " << i;
}

// Many workers adding i64 deltas at once: none lost, the sum exact at a
// magnitude where doubles could no longer count by one.
TEST_P(VectorOpsTest, ConcurrentI64AccumulatorsSumExactly) {
  constexpr int kClients = 4, kIters = 20;
  constexpr std::size_t n = kUnit;  // 32 KiB of i64 per op, over all servers
  constexpr std::int64_t kBase = std::int64_t{1} << 58;
  {
    auto client = make_client();
    make_typed(client, "isum", std::vector<std::int64_t>(n, kBase));
  }
  std::vector<std::string> errors(kClients);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c)
    threads.emplace_back([&, c] {
      try {
        auto client = make_client();
        auto buffer = client.open("isum");
        std::vector<std::int64_t> delta(n);
        for (std::size_t i = 0; i < n; ++i) delta[i] = (std::int64_t{c + 1} << 40) + static_cast<std::int64_t>(i);
        const auto bytes = as_bytes_of(delta);
        for (int i = 0; i < kIters; ++i) buffer.apply(VectorOp::accumulate, DType::i64, 0, n, 1.0, bytes);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(c)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) ASSERT_EQ(e, "");
  auto client = make_client();
  auto buffer = client.open("isum");
  const auto got = read_as<std::int64_t>(buffer, 0, n);
  constexpr std::int64_t kClientSum = kClients * (kClients + 1) / 2;  // 1 + 2 + ... + kClients
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(got[i], kBase + kIters * ((kClientSum << 40) + kClients * static_cast<std::int64_t>(i)))
        << "element " << i;
}

TEST_P(VectorOpsTest, IntegerAxpyAndScaleRefuseAFractionalAlpha) {
  auto client = make_client();
  constexpr std::size_t n = kUnit / 2;  // i32 over every server
  auto y = make_typed(client, "ialpha", std::vector<std::int32_t>(n, 5));
  const auto ones = as_bytes_of(std::vector<std::int32_t>(n, 1));
  expect_errc(smb::Errc::invalid_argument, [&] { y.apply(VectorOp::axpy, DType::i32, 0, n, 0.5, ones); },
              "axpy with alpha 0.5 on i32");
  expect_errc(smb::Errc::invalid_argument, [&] { y.apply(VectorOp::scale, DType::i32, 0, n, 1e19); },
              "scale with an alpha beyond int64");
  EXPECT_EQ(read_as<std::int32_t>(y, 0, n), std::vector<std::int32_t>(n, 5));
}

// The tools follow: smb-bench runs max on i16 and verifies it, smbctl dump
// prints i64 exactly.
TEST_P(VectorOpsTest, ToolsHandleIntegerTypes) {
  const auto bench = run_bench({"--op", "max", "--dtype", "i16", "--name", "m", "--size", "16K", "--value=-7",
                                "--stripe-unit", "4K", "--verify"});
  ASSERT_TRUE(bench.status.success()) << bench.describe();
  auto client = make_client();
  auto y = make_typed(client, "big", std::vector<std::int64_t>{(std::int64_t{1} << 60) + 1, -3});
  const auto dump = run_smbctl({"dump", "big", "--dtype", "i64", "--json"});
  ASSERT_TRUE(dump.status.success()) << dump.describe();
  const auto doc = nlohmann::json::parse(dump.out);
  ASSERT_EQ(doc["values"].size(), 2u);
  EXPECT_EQ(doc["values"][0].get<std::int64_t>(), (std::int64_t{1} << 60) + 1);
  EXPECT_EQ(doc["values"][1].get<std::int64_t>(), -3);
  const auto m = run_smbctl({"dump", "m", "--dtype", "i16", "--count", "2"});
  ASSERT_TRUE(m.status.success()) << m.describe();
  EXPECT_EQ(m.out, "0\n0\n");  // max(0, -7) on the zeroed buffer
}

INSTANTIATE_TEST_SUITE_P(Fabrics, VectorOpsTest, testing::ValuesIn(all_fabrics()), fabric_name);

}  // namespace
