// The tools as a user runs them: smb-bench writes a verifiable buffer in one
// process and another smb-bench process verifies it; smbctl status --json
// reports what each server holds.
#include "expect_error.hpp"
#include "fabric.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <sstream>
#include <thread>

namespace {

using namespace smb::test;
using json = nlohmann::json;

class ToolsTest : public FabricTest {
 protected:
  static json parse_json(const ToolResult& r) {
    const auto doc = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(doc.is_discarded()) << "not JSON:\n" << r.describe();
    return doc.is_discarded() ? json::object() : doc;
  }
};

TEST_P(ToolsTest, BenchWriteKeepThenReadVerifyInAnotherProcess) {
  const std::vector<std::string> shape = {"--size", "3M", "--block", "256K"};
  auto args = shape;
  args.insert(args.end(), {"--name", "bench-t", "--op", "write", "--verify", "--keep", "--json"});
  const auto w = run_bench(args);
  ASSERT_TRUE(w.status.success()) << w.describe();
  const auto wdoc = parse_json(w);
  EXPECT_EQ(wdoc.value("op", ""), "write");
  EXPECT_EQ(wdoc.value("verified", false), true) << w.out;
  for (const char* key : {"bytes", "seconds", "bandwidth_bytes_per_s", "p50_us", "p99_us"})
    EXPECT_TRUE(wdoc.contains(key)) << "--json lacks '" << key << "': " << w.out;

  args = shape;
  args.insert(args.end(), {"--name", "bench-t", "--op", "read", "--verify", "--json"});
  const auto r = run_bench(args);
  ASSERT_TRUE(r.status.success()) << r.describe();
  const auto rdoc = parse_json(r);
  EXPECT_EQ(rdoc.value("verified", false), true) << r.out;
  EXPECT_EQ(rdoc.value("created", true), false) << "the reader must open the writer's buffer";
}

// The README's first example, without --block: a default block, not a refusal.
TEST_P(ToolsTest, BenchWriteAndReadWithoutABlockSize) {
  for (const char* op : {"write", "read"}) {
    const auto r = run_bench({"--name", "no-block", "--op", op, "--size", "3M", "--verify", "--keep", "--json"});
    ASSERT_TRUE(r.status.success()) << op << ": " << r.describe();
    const auto doc = parse_json(r);
    EXPECT_EQ(doc.value("verified", false), true) << r.out;
    EXPECT_EQ(doc.value("block", 0), 1 << 20) << r.out;
  }
}

TEST_P(ToolsTest, BenchReadVerifyFailsOnWrongData) {
  auto client = make_client();
  auto buffer = client.create("not-the-pattern", 1 << 20);
  buffer.write(0, std::vector<std::byte>(1 << 20, std::byte{0x5A}));
  const auto r = run_bench({"--name", "not-the-pattern", "--op", "read", "--size", "1M", "--block", "64K", "--verify"});
  EXPECT_EQ(r.status.code, 1) << "verification must fail with exit 1\n" << r.describe();
  EXPECT_NE(r.err.find("verification"), std::string::npos) << r.err;
}

// A read of a name nobody wrote (a typo) fails, naming it, and creates nothing.
TEST_P(ToolsTest, BenchReadOfAMissingNameFailsAndLeavesNoBuffer) {
  const auto r = run_bench({"--name", "typo", "--op", "read", "--size", "1M", "--verify"});
  EXPECT_FALSE(r.status.success()) << r.describe();
  EXPECT_NE(r.err.find("no buffer 'typo' to read"), std::string::npos) << r.describe();
  auto client = make_client();
  expect_errc(smb::Errc::not_found, [&] { client.open("typo"); }, "the read left a buffer behind");
}

TEST_P(ToolsTest, SmbctlStatusJsonShowsPerServerUsedBytes) {
  auto client = make_client();
  auto buffer = client.create("t", 3ull << 20);  // 1 MiB stripes: an equal share on each of 1 or 3 servers
  const std::uint64_t share = (3ull << 20) / static_cast<std::uint64_t>(server_count());
  const auto r = run_smbctl({"--json", "status"});
  ASSERT_TRUE(r.status.success()) << r.describe();
  const auto doc = parse_json(r);
  ASSERT_TRUE(doc.contains("servers") && doc["servers"].is_array()) << r.out;
  ASSERT_EQ(doc["servers"].size(), static_cast<std::size_t>(server_count())) << r.out;
  const auto ours = addresses();
  std::uint64_t total = 0;
  for (const auto& s : doc["servers"]) {
    const auto address = s.value("address", "");
    EXPECT_NE(std::find(ours.begin(), ours.end(), address), ours.end()) << address;
    EXPECT_EQ(s.value("capacity", 0ull), 64ull << 20) << address;
    EXPECT_EQ(s.value("used", 0ull), share) << address << " should hold a 1/" << server_count() << " share";
    bool listed = false;
    for (const auto& b : s.value("buffers", json::array()))
      listed |= b.value("name", "") == "t" && b.value("bytes", 0ull) == share;
    EXPECT_TRUE(listed) << address << " does not list buffer 't' with its share: " << s.dump();
    total += s.value("used", 0ull);
  }
  EXPECT_EQ(doc["total"].value("used", 0ull), total);
}

// smbctl top: per-server rates from two looks at the servers' running
// totals, while a client applies vector ops; smbctl status --watch: one JSON
// document per refresh.
TEST_P(ToolsTest, SmbctlTopShowsRatesAndStatusWatchRefreshes) {
  auto client = make_client();
  auto buffer = client.create("top", 1 << 20);
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> applied{0};
  std::vector<float> ones(1024, 1.0f);
  std::thread load([&] {
    while (!stop) {
      buffer.apply(smb::VectorOp::accumulate, smb::DType::f32, 0, ones.size(), 1.0, std::as_bytes(std::span(ones)));
      ++applied;
    }
  });
  const auto r = run_smbctl({"top", "--json", "--interval", "0.5", "--iterations", "2"});
  stop = true;
  load.join();
  ASSERT_TRUE(r.status.success()) << r.describe();
  std::vector<json> frames;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) frames.push_back(json::parse(line));
  ASSERT_EQ(frames.size(), 2u) << r.out;
  ASSERT_EQ(frames[1]["servers"].size(), static_cast<std::size_t>(server_count())) << r.out;
  EXPECT_FALSE(frames[0]["servers"][0].contains("requests_per_s")) << "no rate from one look: " << r.out;
  double vector_ops = 0, requests = 0;
  for (const auto& s : frames[1]["servers"]) {
    vector_ops += s.value("vector_ops_per_s", 0.0);
    requests += s.value("requests_per_s", 0.0);
  }
  EXPECT_GT(applied.load(), 0u);
  EXPECT_GT(vector_ops, 0.0) << r.out;
  EXPECT_GE(requests, vector_ops) << r.out;

  const auto w = run_smbctl({"status", "--watch", "--json", "--interval", "0.2", "-n", "3"});
  ASSERT_TRUE(w.status.success()) << w.describe();
  std::istringstream docs(w.out);
  int count = 0;
  for (std::string line; std::getline(docs, line); ++count)
    EXPECT_EQ(json::parse(line)["servers"].size(), static_cast<std::size_t>(server_count())) << line;
  EXPECT_EQ(count, 3) << w.out;
}

// smb-bench's progress bar: drawn on a terminal (a pseudo-terminal made by
// script(1)) for a run longer than half a second, never when piped.
TEST_P(ToolsTest, BenchShowsProgressOnATerminalOnly) {
  // Over TCP: slow enough (about 2 GB/s here) that 3.8 GB take seconds.
  if (GetParam().label != "ucx_tcp" || GetParam().servers > 1)
    GTEST_SKIP() << "the terminal handling is the same on every fabric: tested on ucx_tcp_1server";
  const std::string command = smb_bench_path() + " --servers " + server_list() +
                              " --op write --size 64M --iters 60 --name progress";
  const auto on_terminal = run_tool("/usr/bin/script", {"-qec", command, "/dev/null"}, std::chrono::seconds(120));
  ASSERT_TRUE(on_terminal.status.success()) << on_terminal.describe();
  EXPECT_NE(on_terminal.out.find("write ["), std::string::npos) << on_terminal.out;
  EXPECT_NE(on_terminal.out.find("ETA"), std::string::npos) << on_terminal.out;
  EXPECT_NE(on_terminal.out.find("\x1b[K"), std::string::npos) << "the bar is erased before the report";
  const auto piped = run_bench({"--op", "write", "--size", "64M", "--iters", "20", "--name", "progress"});
  ASSERT_TRUE(piped.status.success()) << piped.describe();
  EXPECT_EQ(piped.err.find("ETA"), std::string::npos) << piped.err;
  EXPECT_EQ(piped.out.find("ETA"), std::string::npos) << piped.out;
}

// The small-op latency benchmarks: compare-and-swap increments verified by
// the words' sum, a notify/wait ping-pong, and barriers of two processes.
TEST_P(ToolsTest, BenchSmallOpsRunAndVerify) {
  const auto cas = run_bench({"--op", "compare-swap", "--size", "64", "--iters", "300", "--threads", "2", "--verify",
                              "--json"});
  ASSERT_TRUE(cas.status.success()) << cas.describe();
  const auto cdoc = parse_json(cas);
  EXPECT_EQ(cdoc.value("verified", false), true) << cas.out;
  EXPECT_EQ(cdoc.value("ops", 0ull), 600u) << cas.out;

  const auto notify = run_bench({"--op", "notify", "--size", "8", "--iters", "50", "--json"});
  ASSERT_TRUE(notify.status.success()) << notify.describe();
  const auto ndoc = parse_json(notify);
  EXPECT_EQ(ndoc.value("ops", 0ull), 50u) << notify.out;
  EXPECT_GT(ndoc.value("p50_us", 0.0), 0.0) << notify.out;

  // Two processes of one thread each meet 20 times at one barrier.
  const std::vector<std::string> args = {"--op", "barrier", "--name", "bar", "--size", "8", "--iters", "20",
                                         "--parties", "2", "--json"};
  std::vector<std::string> full = {"--servers", server_list()};
  full.insert(full.end(), args.begin(), args.end());
  const pid_t other = spawn(smb_bench_path(), full, -1, -1);
  const auto mine = run_bench(args);
  auto theirs = wait_for_exit(other, std::chrono::seconds(60));
  if (!theirs) {
    ::kill(other, SIGKILL);
    theirs = wait_for_exit(other, std::chrono::seconds(5));
    ADD_FAILURE() << "the other barrier process hung";
  }
  ASSERT_TRUE(mine.status.success()) << mine.describe();
  ASSERT_TRUE(theirs && theirs->success()) << "the other barrier process: " << (theirs ? theirs->describe() : "?");
  EXPECT_EQ(parse_json(mine).value("ops", 0ull), 20u) << mine.out;
}

TEST_P(ToolsTest, ToolsReportAnUnreachableServer) {
  // smbctl reports it (exit 3: degraded, see degraded_fabric_test.cpp); smb-bench cannot run without it.
  const auto s = run_tool(smbctl_path(), {"--servers", "127.0.0.1:1", "status"});
  EXPECT_EQ(s.status.code, 3) << s.describe();
  EXPECT_NE(s.out.find("127.0.0.1:1"), std::string::npos) << "the report should name the server\n" << s.out;
  EXPECT_NE(s.out.find("UNREACHABLE"), std::string::npos) << s.out;
  const auto b = run_tool(smb_bench_path(), {"--servers", "127.0.0.1:1", "--op", "write", "--size", "1M", "--block", "64K"});
  EXPECT_EQ(b.status.code, 1) << b.describe();
  EXPECT_NE(b.err.find("127.0.0.1:1"), std::string::npos) << b.err;
}

// smbctl ls with a server list that misses a buffer's layout keepers: the
// buffer is listed or named as unlisted (with the servers asked, exit 3),
// never left out without a word.
TEST_P(ToolsTest, LsNamesBuffersWhoseLayoutNoListedServerKeeps) {
  if (server_count() < 3) GTEST_SKIP() << "needs servers that hold a buffer's stripes but not its layout";
  auto client = make_client();
  smb::BufferOptions spread;
  spread.stripe_unit = 4096;  // a stripe on every server
  auto buffer = client.create("spread", 3 * 4096, spread);
  int named_unlisted = 0;
  for (const auto& alone : addresses()) {
    const auto r = run_tool(smbctl_path(), {"--servers", alone, "ls"});
    const bool listed = r.out.find("spread") != std::string::npos && r.out.find("not listed") == std::string::npos;
    if (listed) {
      EXPECT_EQ(r.status.code, 0) << r.describe();
      continue;
    }
    ++named_unlisted;
    EXPECT_EQ(r.status.code, 3) << "a buffer left out is a degraded view\n" << r.describe();
    EXPECT_NE(r.out.find("1 buffer(s) not listed"), std::string::npos) << r.describe();
    EXPECT_NE(r.out.find("'spread' on " + alone), std::string::npos) << r.describe();
    EXPECT_NE(r.out.find("server asked (" + alone + ")"), std::string::npos) << r.describe();
    const auto j = run_tool(smbctl_path(), {"--servers", alone, "--json", "ls"});
    EXPECT_EQ(j.status.code, 3) << j.describe();
    const auto doc = parse_json(j);
    ASSERT_EQ(doc.value("unlisted", json::array()).size(), 1u) << j.out;
    EXPECT_EQ(doc["unlisted"][0].value("name", ""), "spread") << j.out;
  }
  EXPECT_GE(named_unlisted, 1) << "some server holds a stripe of 'spread' but not its layout";
  // With every server asked, nothing is unlisted.
  const auto all = run_smbctl({"ls"});
  EXPECT_EQ(all.status.code, 0) << all.describe();
  EXPECT_EQ(all.out.find("not listed"), std::string::npos) << all.out;
}

INSTANTIATE_TEST_SUITE_P(Fabrics, ToolsTest, testing::ValuesIn(all_fabrics()), fabric_name);

}  // namespace
