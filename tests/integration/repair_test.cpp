// Repair (Client::repair, smbctl repair): a server killed with SIGKILL and
// restarted empty gets its copies of replicated buffers back from the other
// copies; afterwards the buffer survives losing the server that had served
// them meanwhile, vector ops keep both copies in one order, and a repair is
// refused while another client has the buffer open.
#include "raw_connection.hpp"
#include "replication_fixture.hpp"

#include <nlohmann/json.hpp>

#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>

namespace {

using namespace smb::test;

class RepairTest : public ReplicationTest {
 protected:
  nlohmann::json json_of(const ToolResult& r) {
    auto doc = nlohmann::json::parse(r.out, nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << r.describe();
    return doc;
  }
  // The state smbctl info gives the buffer ("ok", "degraded: ...").
  std::string state_of(const std::string& name) { return json_of(run_smbctl({"--json", "info", name})).value("state", ""); }
  // Neither the home of `name` nor `victim`: the server whose loss after a
  // repair leaves some stripes only in the repaired copies.
  std::size_t third(const std::string& name, std::size_t victim) { return 3 - home_of(name) - victim; }
};

TEST_P(RepairTest, ARestartedServerGetsItsCopiesBackAndTheBufferSurvivesTheNextLoss) {
  const std::uint64_t size = 3 * kUnit * 7 + 456;  // uneven shares, a partial last stripe
  const auto count = size / sizeof(double);
  std::vector<double> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<double>(i) * 0.5;
  {
    auto client = make_client();
    auto buffer = client.create("kt", size, replicated());
    buffer.write(0, doubles(values));
    buffer.apply(smb::VectorOp::accumulate, smb::DType::f64, 0, count, 1.0, doubles(std::vector<double>(count, 1.0)));
    for (auto& v : values) v += 1.0;
  }  // closed: a buffer in use cannot be repaired yet
  const auto victim = not_home_of("kt");
  restart_server(victim);
  EXPECT_TRUE(state_of("kt").starts_with("degraded")) << state_of("kt");

  const auto repair = run_smbctl({"--json", "repair", "kt"});
  ASSERT_EQ(repair.status.code, 0) << repair.describe();
  const auto doc = json_of(repair);
  ASSERT_EQ(doc["buffers"].size(), 1u) << repair.out;
  const auto& report = doc["buffers"][0];
  EXPECT_EQ(report.value("result", ""), "repaired") << repair.out;
  EXPECT_EQ(report["repaired"].size(), 2u) << "the server held copy 0 of one position and copy 1 of another\n"
                                           << repair.out;
  std::uint64_t bytes = 0;
  for (const auto& copy : report["repaired"]) {
    EXPECT_EQ(copy.value("server", ""), server(victim).address()) << repair.out;
    EXPECT_NE(copy.value("source", ""), server(victim).address()) << repair.out;
    bytes += copy.value("bytes", 0ull);
  }
  EXPECT_EQ(report.value("bytes", 0ull), bytes);
  EXPECT_EQ(state_of("kt"), "ok");
  const auto again = run_smbctl({"repair", "kt"});
  EXPECT_EQ(again.status.code, 0) << again.describe();
  EXPECT_TRUE(mentions(again.out, "buffer 'kt': whole")) << again.out;

  // Vector ops after the repair: the repaired copy took its source's
  // version, so the ordered copy of each op follows at once (a copy left
  // behind would be dropped after a 5 s wait, and the read below would fail).
  auto client = fresh_client();
  auto buffer = client.open("kt");
  buffer.apply(smb::VectorOp::scale, smb::DType::f64, 0, count, 2.0);
  for (auto& v : values) v *= 2.0;
  // Losing the third server leaves some stripes only in the repaired copies.
  server(third("kt", victim)).kill();
  ByteVec got(count * sizeof(double));
  buffer.read(0, got);
  EXPECT_EQ(as_doubles(got), values) << "read after the repair and the loss of another server";
  auto later = fresh_client();
  ByteVec seen(count * sizeof(double));
  later.open("kt").read(0, seen);
  EXPECT_EQ(as_doubles(seen), values) << "a fresh client's read";
}

TEST_P(RepairTest, ABufferOpenElsewhereIsRefusedAndOpensWaitForARepair) {
  auto holder = make_client();
  auto held = holder.create("busy", 3 * kUnit * 2, replicated());
  held.write(0, pattern_bytes(0, held.size()));
  auto plain = holder.create("single", 3 * kUnit);
  const auto victim = not_home_of("busy");
  restart_server(victim);

  auto repairer = fresh_client();
  expect_error([&] { repairer.repair("busy"); }, smb::Errc::busy, "open in other clients");
  expect_error([&] { repairer.repair("single"); }, smb::Errc::invalid_argument, "one copy");
  {
    auto own = repairer.open("busy");  // the repairing client's own handle counts too
    held.close();
    expect_error([&] { repairer.repair("busy"); }, smb::Errc::busy, "this client has it open");
    held = holder.open("busy");
  }
  const auto listed = run_smbctl({"repair"});
  EXPECT_EQ(listed.status.code, 3) << "still degraded\n" << listed.describe();
  EXPECT_TRUE(mentions(listed.out, "buffer 'busy': busy")) << listed.out;
  EXPECT_FALSE(mentions(listed.out, "'single'")) << "unreplicated buffers are not repair's\n" << listed.out;
  EXPECT_TRUE(state_of("busy").starts_with("degraded"));
  held.close();
  const auto report = repairer.repair("busy");
  EXPECT_EQ(report.repaired.size(), 2u);
  EXPECT_EQ(state_of("busy"), "ok");

  // While a repair holds the buffer (here a bare session that began one),
  // opens wait; they fail busy after the client's timeout, and go on once
  // the repair ends (its session closing ends it too).
  const auto home = server(home_of("busy")).address();
  {
    RawConnection raw(home);
    raw.send(msgpack_frame(1, 1, {{"client", "test"}, {"transport", fabric_transport()}}));
    ASSERT_TRUE(raw.receive());
    raw.send(msgpack_frame(22, 2, {{"name", "busy"}}));  // begin_repair
    const auto began = raw.receive();
    ASSERT_TRUE(began);
    ASSERT_TRUE(began->body.contains("layout")) << began->body.dump();
    auto impatient_options = client_options(std::chrono::milliseconds(500));
    smb::Client impatient(impatient_options);
    expect_error([&] { impatient.open("busy"); }, smb::Errc::busy, "being repaired");
    expect_error([&] { repairer.repair("busy"); }, smb::Errc::busy, "being repaired by another client");
  }
  ByteVec got(3 * kUnit * 2);
  make_client().open("busy").read(0, got);
  EXPECT_TRUE(holds_pattern(got, 0));
}

TEST_P(RepairTest, TheWatchModeRepairsAServerThatComesBack) {
  {
    auto client = make_client();
    client.create("auto", 3 * kUnit * 3, replicated()).write(0, pattern_bytes(0, 3 * kUnit * 3));
  }
  std::unique_ptr<FILE, int (*)(FILE*)> log(std::tmpfile(), &std::fclose);
  ASSERT_TRUE(log);
  const pid_t watcher = spawn(smbctl_path(), {"--servers", server_list(), "repair", "--watch", "--interval", "0.2"},
                              fileno(log.get()), fileno(log.get()));
  const auto text = [&] {
    std::string out;
    std::rewind(log.get());
    char chunk[4096];
    while (const auto n = std::fread(chunk, 1, sizeof chunk, log.get())) out.append(chunk, n);
    return out;
  };
  const auto victim = not_home_of("auto");
  restart_server(victim);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (state_of("auto") != "ok" && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ::kill(watcher, SIGKILL);
  wait_for_exit(watcher, std::chrono::seconds(10));
  EXPECT_EQ(state_of("auto"), "ok") << text();
  EXPECT_TRUE(mentions(text(), "buffer 'auto': repaired")) << text();
  // The repaired copies hold the data: lose the other servers' copies of them.
  server(third("auto", victim)).kill();
  ByteVec got(3 * kUnit * 3);
  fresh_client().open("auto").read(0, got);
  EXPECT_TRUE(holds_pattern(got, 0));
}

INSTANTIATE_TEST_SUITE_P(Fabrics, RepairTest, testing::ValuesIn(multi_server_fabrics()), fabric_name);

}  // namespace
