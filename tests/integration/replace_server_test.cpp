// Replacing a server lost for good (Client::replace_server, smbctl repair
// --onto): a new smbd at another address takes the lost one's place, the
// repair rebuilds its copies and layout records there, clients that hold
// the buffer go on without reopening, and new clients that still list the
// lost address find the replacement. Refusals change nothing.
#include "replication_fixture.hpp"
#include "smbd_process.hpp"

#include <nlohmann/json.hpp>

namespace {

using namespace smb::test;

class ReplaceServerTest : public ReplicationTest {
 protected:
  static std::vector<double> sequence(std::size_t count, double scale) {
    std::vector<double> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<double>(i) * scale;
    return v;
  }
};

TEST_P(ReplaceServerTest, ALostHomeIsReplacedAtANewAddressAndItsHoldersGoOnWithoutReopening) {
  const std::uint64_t size = 3 * kUnit * 5 + 200;
  const auto count = size / sizeof(double);
  auto values = sequence(count, 0.25);
  auto holder = make_client();
  auto held = holder.create("rs", size, replicated());
  held.write(0, doubles(values));
  held.apply(smb::VectorOp::accumulate, smb::DType::f64, 0, count, 1.0, doubles(std::vector<double>(count, 1.0)));
  for (auto& v : values) v += 1.0;

  // The home of the layout record is lost for good; the holder writes on.
  const auto victim = home_of("rs");
  const auto lost = server(victim).address();
  server(victim).kill();
  held.apply(smb::VectorOp::accumulate, smb::DType::f64, 0, count, 1.0, doubles(std::vector<double>(count, 1.0)));
  for (auto& v : values) v += 1.0;
  EXPECT_TRUE(state_of("rs").starts_with("degraded")) << state_of("rs");

  const auto spare = start_spare();
  const auto repair = run_smbctl({"--json", "repair", "--onto", spare->address()});
  ASSERT_EQ(repair.status.code, 0) << repair.describe();
  const auto doc = json_of(repair);
  EXPECT_EQ(doc["replaced"].value("server", ""), lost) << repair.out;
  EXPECT_EQ(doc["replaced"].value("by", ""), spare->address()) << repair.out;
  EXPECT_EQ(doc["replaced"]["told"].size(), 3u) << "the two live servers and the replacement\n" << repair.out;
  ASSERT_EQ(doc["buffers"].size(), 1u) << repair.out;
  const auto& report = doc["buffers"][0];
  EXPECT_EQ(report.value("result", ""), "repaired") << repair.out;
  EXPECT_EQ(report["repaired"].size(), 2u) << repair.out;
  for (const auto& copy : report["repaired"]) EXPECT_EQ(copy.value("server", ""), lost) << repair.out;
  EXPECT_EQ(report["records_restored"], nlohmann::json::array({lost})) << "the home's record, on the replacement\n"
                                                                       << repair.out;
  EXPECT_EQ(state_of("rs"), "ok");
  EXPECT_EQ(holder.replaced_servers().at(lost), spare->address());

  // The holder adopted the rebuilt copies: what it does now reaches the
  // replacement (the next loss leaves some stripes there alone).
  held.apply(smb::VectorOp::scale, smb::DType::f64, 0, count, 2.0);
  for (auto& v : values) v *= 2.0;
  const auto tail = sequence(count / 2, 3.0);
  held.write(0, doubles(tail));
  std::copy(tail.begin(), tail.end(), values.begin());
  // The record's other keeper: the record is left on the replacement alone.
  server(index_of(keeper_after(victim, 1))).kill();

  // The new client still lists the lost address: the replacement serves it,
  // and the record is read from it (both original keepers are gone).
  expect_values(held, "rs", values, "after the other keeper was lost too");
  const auto status = run_smbctl({"--json", "status"});
  EXPECT_TRUE(mentions(status.out, spare->address())) << status.describe();
}

TEST_P(ReplaceServerTest, ReplacingIsRefusedWhereItWouldSplitClientsAndChangesNothing) {
  auto client = make_client();
  auto buffer = client.create("rf", 3 * kUnit * 2, replicated());
  const auto spare = start_spare();

  const auto none_lost = run_smbctl({"repair", "--onto", spare->address()});
  EXPECT_EQ(none_lost.status.code, 1) << none_lost.describe();
  EXPECT_TRUE(mentions(none_lost.err, "no server is lost")) << none_lost.describe();

  const auto live = run_smbctl({"repair", "--replace", server(0).address(), "--onto", spare->address()});
  EXPECT_EQ(live.status.code, 1) << live.describe();
  EXPECT_TRUE(mentions(live.err, "Only a lost server is replaced")) << live.describe();

  server(1).kill();
  const auto member = run_smbctl({"repair", "--onto", server(2).address()});
  EXPECT_EQ(member.status.code, 1) << member.describe();
  EXPECT_TRUE(mentions(member.err, "one of the fabric's servers already")) << member.describe();

  auto nobody = SmbdProcess();  // an address where nothing listens once it is gone
  const auto gone = nobody.address();
  nobody.kill();
  const auto unreachable = run_smbctl({"repair", "--onto", gone});
  EXPECT_EQ(unreachable.status.code, 1) << unreachable.describe();
  EXPECT_TRUE(mentions(unreachable.err, "the replacement cannot be reached")) << unreachable.describe();

  EXPECT_TRUE(make_client().replaced_servers().empty()) << "a refusal told no server anything";
  EXPECT_TRUE(fresh_client().replaced_servers().empty());
}

// The automatic mode: a server unreachable for --replace-after takes the
// spare, and the same pass rebuilds its copies there.
TEST_P(ReplaceServerTest, TheWatchModeReplacesAServerLostForLongerThanItsGraceWithASpare) {
  const std::uint64_t size = 3 * kUnit * 3;
  make_client().create("wr", size, replicated()).write(0, pattern_bytes(0, size));
  const auto spare = start_spare();
  BackgroundSmbctl watcher({"--servers", server_list(), "repair", "--watch", "--interval", "0.2", "--onto",
                            spare->address(), "--replace-after", "1"});
  const auto victim = not_home_of("wr");
  const auto lost = server(victim).address();
  server(victim).kill();
  BackgroundSmbctl::eventually(
      [&] { return mentions(watcher.text(), "buffer 'wr': repaired") && state_of("wr") == "ok"; });
  const auto text = watcher.text();
  watcher.stop();
  EXPECT_TRUE(mentions(text, "server " + lost + " replaced: served at " + spare->address())) << text;
  EXPECT_TRUE(mentions(text, "buffer 'wr': repaired")) << text;
  EXPECT_EQ(state_of("wr"), "ok") << text;
  server(third("wr", victim)).kill();  // some stripes are left on the spare alone
  ByteVec got(size);
  fresh_client().open("wr").read(0, got);
  EXPECT_TRUE(holds_pattern(got, 0));
}

INSTANTIATE_TEST_SUITE_P(Fabrics, ReplaceServerTest, testing::ValuesIn(multi_server_fabrics()), fabric_name);

}  // namespace
