// A buffer is reachable by name from any other process, with no master: here
// the other process is smbctl or smb-bench, started as a separate program
// (its own UCX context, its own connections) against the same servers.
#include "data.hpp"
#include "expect_error.hpp"
#include "fabric.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

using namespace smb::test;
using json = nlohmann::json;

class CrossProcessTest : public FabricTest {
 protected:
  static smb::BufferOptions small_stripes() {
    smb::BufferOptions o;
    o.stripe_unit = 4096;
    return o;
  }

  // The tool's stdout as JSON, failing the test with its whole output if not.
  static json parse_json(const ToolResult& r) {
    const auto doc = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(doc.is_discarded()) << "not JSON:\n" << r.describe();
    return doc;
  }
};

TEST_P(CrossProcessTest, LayoutCreatedHereIsSeenBySmbctl) {
  auto client = make_client();
  const std::uint64_t size = 5 * 4096 + 333;
  auto buffer = client.create("from-test", size, small_stripes());
  const auto r = run_smbctl({"--json", "info", "from-test"});
  ASSERT_TRUE(r.status.success()) << r.describe();
  const auto doc = parse_json(r);
  EXPECT_EQ(doc.value("size", 0ull), size);
  EXPECT_EQ(doc.value("stripe_unit", 0ull), 4096u);
  ASSERT_TRUE(doc.contains("servers") && doc["servers"].is_array()) << r.out;
  ASSERT_EQ(doc["servers"].size(), buffer.layout().servers.size());
  for (std::size_t i = 0; i < doc["servers"].size(); ++i) {
    EXPECT_EQ(doc["servers"][i].value("address", ""), buffer.layout().servers[i]);
    EXPECT_EQ(doc["servers"][i].value("share", 0ull), buffer.layout().shares[i]);
  }
  const auto ls = run_smbctl({"--json", "ls"});
  ASSERT_TRUE(ls.status.success()) << ls.describe();
  EXPECT_NE(ls.out.find("from-test"), std::string::npos) << ls.out;
}

TEST_P(CrossProcessTest, BufferRemovedBySmbctlIsGoneHere) {
  auto client = make_client();
  client.create("doomed", 10000, small_stripes()).close();
  const auto r = run_smbctl({"rm", "doomed"});
  ASSERT_TRUE(r.status.success()) << r.describe();
  expect_errc(smb::Errc::not_found, [&] { client.open("doomed"); }, "open after smbctl rm");
  const auto again = run_smbctl({"rm", "doomed"});
  EXPECT_EQ(again.status.code, 1) << "removing an unknown name is an error\n" << again.describe();
}

TEST_P(CrossProcessTest, WrittenHereReadByAnotherProcess) {
  auto client = make_client();
  const std::uint64_t size = 3 * 4096 * 7 + 1000;
  auto buffer = client.create("handoff", size, small_stripes());
  buffer.write(0, pattern_bytes(0, size));
  const auto r = run_bench({"--name", "handoff", "--op", "read", "--size", std::to_string(size), "--block", "5000",
                            "--verify", "--json"});
  EXPECT_TRUE(r.status.success()) << r.describe();
  EXPECT_EQ(parse_json(r).value("verified", false), true) << r.out;
}

TEST_P(CrossProcessTest, WrittenByAnotherProcessReadHere) {
  const std::uint64_t size = 3 * 4096 * 7 + 1000;
  const auto r = run_bench({"--name", "handback", "--op", "write", "--size", std::to_string(size), "--block", "5000",
                            "--stripe-unit", "4096", "--verify", "--keep", "--json"});
  ASSERT_TRUE(r.status.success()) << r.describe();
  auto client = make_client();
  auto buffer = client.open("handback");
  EXPECT_EQ(buffer.layout().stripe_unit, 4096u);
  ByteVec got(size);
  buffer.read(0, got);
  EXPECT_TRUE(holds_pattern(got, 0));
}

TEST_P(CrossProcessTest, AtomicsFromAnotherProcessAddUp) {
  auto client = make_client();
  auto buffer = client.create("tally", 64, small_stripes());
  buffer.write(0, ByteVec(64));
  // 2 threads x 100 fetch-adds over the 8 words, in another process.
  const auto r = run_bench({"--name", "tally", "--op", "fetch-add", "--size", "64", "--iters", "100", "--threads", "2",
                            "--verify", "--json"});
  ASSERT_TRUE(r.status.success()) << r.describe();
  std::uint64_t sum = 0;
  ByteVec words(64);
  buffer.read(0, words);
  for (std::size_t i = 0; i < 8; ++i) sum += load_u64(std::span(words).subspan(i * 8, 8));
  EXPECT_EQ(sum, 200u);
}

INSTANTIATE_TEST_SUITE_P(Fabrics, CrossProcessTest, testing::ValuesIn(all_fabrics()), fabric_name);

}  // namespace
