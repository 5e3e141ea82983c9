// A fabric with a server down or restarted empty, as an operator sees it:
// smbctl status, ls and info still report what the live servers hold, name
// the unreachable one, and exit 3; a buffer whose share was on a server
// that restarted reports that share lost (Errc::data_lost), not "no segment
// here".
#include "data.hpp"
#include "expect_error.hpp"
#include "fabric.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace {

using namespace smb::test;
using json = nlohmann::json;

constexpr int kDegraded = 3;  // smbctl's exit status for a degraded fabric
constexpr int kBuffers = 12;  // names spread over every home server (the chance one gets none: 3 x (2/3)^12)

class DegradedFabricTest : public FabricTest {
 protected:
  void SetUp() override {
    FabricTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto client = make_client();
    smb::BufferOptions small;
    small.stripe_unit = 4096;  // every server holds a share of every buffer
    for (int i = 0; i < kBuffers; ++i) {
      auto b = client.create(name(i), 3 * 4096, small);
      b.write(0, pattern_bytes(0, b.size(), static_cast<std::uint8_t>(i)));
    }
  }
  static std::string name(int i) { return "b" + std::to_string(i); }

  static json parse(const ToolResult& r) {
    const auto doc = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(doc.is_discarded()) << "not JSON:\n" << r.describe();
    return doc.is_discarded() ? json::object() : doc;
  }
  // The buffers smbctl ls --json lists, by name.
  std::map<std::string, json> listed(const json& ls) {
    std::map<std::string, json> out;
    for (const auto& b : ls.value("buffers", json::array())) out[b.value("name", "")] = b;
    return out;
  }
};

TEST_P(DegradedFabricTest, SmbctlReportsTheLiveServersAndNamesTheUnreachableOne) {
  const std::string gone = server(0).address();
  server(0).kill();

  const auto status = run_smbctl({"--json", "status"});
  EXPECT_EQ(status.status.code, kDegraded) << status.describe();
  const auto sdoc = parse(status);
  EXPECT_TRUE(sdoc.value("degraded", false)) << status.out;
  ASSERT_EQ(sdoc.value("servers", json::array()).size(), 3u) << status.out;
  for (const auto& s : sdoc["servers"]) {
    if (s.value("address", "") == gone) {
      EXPECT_FALSE(s.value("reachable", true)) << s.dump();
      EXPECT_TRUE(mentions(s.value("error", ""), gone)) << "the error should name the server";
    } else {
      EXPECT_TRUE(s.value("reachable", false)) << s.dump();
      EXPECT_EQ(s.value("capacity", 0ull), 64ull << 20) << s.dump();
      EXPECT_EQ(s.value("buffers", json::array()).size(), static_cast<std::size_t>(kBuffers)) << s.dump();
    }
  }
  const auto table = run_smbctl({"status"});
  EXPECT_EQ(table.status.code, kDegraded) << table.describe();
  EXPECT_TRUE(mentions(table.out, "UNREACHABLE"));
  EXPECT_TRUE(mentions(table.out, "(1 unreachable)"));

  const auto ls = run_smbctl({"--json", "ls"});
  EXPECT_EQ(ls.status.code, kDegraded) << ls.describe();
  const auto ldoc = parse(ls);
  ASSERT_EQ(ldoc.value("unreachable", json::array()).size(), 1u) << ls.out;
  EXPECT_EQ(ldoc["unreachable"][0].value("address", ""), gone);
  const auto buffers = listed(ldoc);
  // Layouts homed on the lost server cannot be listed; the others are, degraded.
  EXPECT_GT(buffers.size(), 0u) << ls.out;
  EXPECT_LT(buffers.size(), static_cast<std::size_t>(kBuffers)) << ls.out;
  for (const auto& [name, b] : buffers) EXPECT_EQ(b.value("state", ""), "degraded: 1 of 3 servers unreachable") << b.dump();

  // info: the listed ones show which share is out of reach; the others say
  // that their home, which keeps the layout, is unreachable.
  for (int i = 0; i < kBuffers; ++i) {
    const auto info = run_smbctl({"--json", "info", name(i)});
    if (buffers.contains(name(i))) {
      EXPECT_EQ(info.status.code, kDegraded) << info.describe();
      for (const auto& s : parse(info).value("servers", json::array()))
        EXPECT_EQ(s.value("state", ""), s.value("address", "") == gone ? "unreachable" : "ok") << s.dump();
    } else {
      EXPECT_EQ(info.status.code, 1) << info.describe();
      EXPECT_TRUE(mentions(info.err, "home server " + gone));
      EXPECT_TRUE(mentions(info.err, "cannot be reached"));
    }
  }
}

TEST_P(DegradedFabricTest, AServerRestartedEmptyReportsItsShareLost) {
  const std::string restarted = server(0).address();
  restart_server(0);

  auto client = make_client();
  std::vector<smb::Layout> layouts = client.list();  // those homed on the restarted server are gone with it
  ASSERT_FALSE(layouts.empty());
  for (const auto& layout : layouts) {
    const auto text = expect_errc(smb::Errc::data_lost, [&] { client.open(layout.name); }, "open " + layout.name);
    EXPECT_TRUE(mentions(text, "buffer '" + layout.name + "'"));
    EXPECT_TRUE(mentions(text, "lost: server " + restarted + " restarted"));
    const auto states = client.check(layout);
    for (std::size_t i = 0; i < states.size(); ++i)
      EXPECT_EQ(states[i], layout.servers[i] == restarted ? smb::ShareState::restarted : smb::ShareState::ok);
  }

  const auto info = run_smbctl({"--json", "info", layouts[0].name});
  EXPECT_EQ(info.status.code, kDegraded) << info.describe();
  EXPECT_TRUE(mentions(parse(info).value("state", ""), "lost: " + restarted + " restarted"));
  const auto ls = run_smbctl({"ls"});
  EXPECT_EQ(ls.status.code, kDegraded) << ls.describe();
  EXPECT_TRUE(mentions(ls.out, "lost: " + restarted + " restarted"));

  // A buffer made after the restart is whole again.
  auto fresh = client.create("after-restart", 3 * 4096);
  fresh.write(0, pattern_bytes(0, fresh.size()));
  ByteVec got(fresh.size());
  smb::Client other = make_client();
  other.open("after-restart").read(0, got);
  EXPECT_TRUE(holds_pattern(got, 0));
}

TEST_P(DegradedFabricTest, AClientConnectsToTheServersThatAreThere) {
  const std::string gone = server(1).address();
  server(1).kill();
  smb::Client client(client_options());  // by default too: one server down is not fatal
  const auto unreachable = client.unreachable_servers();
  ASSERT_EQ(unreachable.size(), 1u);
  EXPECT_EQ(unreachable.begin()->first, gone);
  for (const auto& s : client.status()) EXPECT_EQ(s.reachable, s.address != gone) << s.address << ": " << s.error;
  // A call that needs the lost server fails at once, naming it.
  smb::BufferOptions there;
  there.servers = {gone};
  const auto text = expect_errc(smb::Errc::unreachable, [&] { client.create("needs-it", 4096, there); }, "create");
  EXPECT_TRUE(mentions(text, gone));
}

INSTANTIATE_TEST_SUITE_P(Fabrics, DegradedFabricTest, testing::ValuesIn(multi_server_fabrics()), fabric_name);

}  // namespace
