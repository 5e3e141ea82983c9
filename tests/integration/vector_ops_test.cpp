// Server-side vector ops through real smbd processes: results against a
// reference, many concurrent accumulators losing no update, x taken from
// another buffer (the SEASGD delta area), bad requests refused with the
// target left intact, and the shell check `smbctl dump` offers.
#include "data.hpp"
#include "expect_error.hpp"
#include "fabric.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
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

class VectorOpsTest : public FabricTest {
 protected:
  smb::Buffer make(smb::Client& client, const std::string& name, std::size_t floats_count, float fill) {
    smb::BufferOptions o;
    o.stripe_unit = kUnit;
    auto buffer = client.create(name, floats_count * 4, o);
    buffer.write(0, floats(std::vector<float>(floats_count, fill)));
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

INSTANTIATE_TEST_SUITE_P(Fabrics, VectorOpsTest, testing::ValuesIn(all_fabrics()), fabric_name);

}  // namespace
