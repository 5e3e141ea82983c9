// smbctl doctor as a user runs it: against real daemons, each server's
// stages (control port, hello, its host's checks and clock, the data path
// with real bytes); a server that is not there blocks and is named; limits
// below what the fabric needs are named with the command that fixes them.
// (The RDMA device, port and GID checks run in the soft-RoCE VM:
// tests/softroce/suite.sh, case doctor.)
#include "fabric.hpp"

#include <smb/config.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace {

using namespace smb::test;
using json = nlohmann::json;

json parse(const ToolResult& r) {
  const auto doc = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(doc.is_discarded()) << "not JSON:\n" << r.describe();
  return doc.is_discarded() ? json::object() : doc;
}

// The findings of `where` named `check` ("this host", "h:p", "h:p (its host)").
std::vector<json> findings(const json& doc, const std::string& where, const std::string& check) {
  std::vector<json> out;
  for (const auto& f : doc.value("findings", json::array()))
    if (f.value("where", "") == where && f.value("check", "") == check) out.push_back(f);
  return out;
}

class DoctorTest : public FabricTest {};

TEST_P(DoctorTest, EveryServerAnswersEachStageAndMovesRealBytes) {
  const auto r = run_smbctl({"doctor", "--json", "--transport", fabric_transport()});
  ASSERT_EQ(r.status.code, 0) << "nothing should block on a working fabric\n" << r.describe();
  const auto doc = parse(r);
  EXPECT_EQ(doc.value("blocking", -1), 0) << r.out;
  ASSERT_EQ(doc.value("servers", json::array()).size(), addresses().size()) << r.out;
  for (const auto& s : doc["servers"]) {
    const auto address = s.value("address", "");
    EXPECT_TRUE(s.value("reachable", false)) << address << "\n" << r.out;
    EXPECT_GT(s.value("control_port_ms", 0.0), 0.0) << r.out;
    EXPECT_GT(s.value("hello_ms", 0.0), 0.0) << r.out;
    // Its clock, read between two of ours on this same host: within the round trip.
    EXPECT_LE(std::abs(s.value("clock_offset_ms", 1e9)), s.value("clock_uncertainty_ms", 0.0) + 50) << r.out;
    const auto data = s.value("data_path", json::object());
    EXPECT_GT(data.value("round_trip_us", 0.0), 0.0) << r.out;
    EXPECT_NE(data.value("path", "").find(fabric_transport()), std::string::npos)
        << "the path should name the transport\n" << r.out;
    for (const char* check : {"control port", "hello", "clock", "data path"}) {
      const auto found = findings(doc, address, check);
      ASSERT_EQ(found.size(), 1u) << check << " of " << address << "\n" << r.out;
      EXPECT_EQ(found[0].value("level", ""), "ok") << r.out;
    }
    // The server's own host checks, as its process sees them.
    EXPECT_EQ(findings(doc, address + " (its host)", "open files").size(), 1u) << r.out;
    EXPECT_EQ(findings(doc, address + " (its host)", "memlock").size(), 1u) << r.out;
  }
  // The probe's buffer is gone again.
  auto client = make_client();
  for (const auto& layout : client.list())
    EXPECT_EQ(layout.name.rfind("smbctl-doctor/", 0), std::string::npos) << layout.name << " was left behind";
}

TEST_P(DoctorTest, AServerThatIsNotThereBlocksAndIsNamedWithItsStage) {
  const auto r = run_tool(smbctl_path(), {"--servers", server_list() + ",127.0.0.1:1", "doctor", "--transport",
                                          fabric_transport()});
  EXPECT_EQ(r.status.code, 3) << r.describe();
  EXPECT_NE(r.out.find("127.0.0.1:1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("control port"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Connection refused"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fix:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 problem(s) block"), std::string::npos) << "the others should pass\n" << r.out;
}

INSTANTIATE_TEST_SUITE_P(Fabrics, DoctorTest, testing::ValuesIn(all_fabrics()), fabric_name);

// This host alone (no servers): limits below what is needed fail or warn,
// each with its fix, and the exit status says so.
TEST(DoctorLimitsTest, LimitsBelowWhatTheFabricNeedsAreNamedWithTheirFix) {
  // 256 open files: a warning. The memlock part needs a transport that pins
  // (verbs), and a process without CAP_IPC_LOCK (root has it: dropped from
  // the bounding set, which root's exec then takes its capabilities from).
  const bool verbs = std::string(SMB_TRANSPORTS).find("verbs") != std::string::npos;
  std::vector<std::string> args = {"--nofile=256:256", "--memlock=1048576:1048576", "--", "/usr/bin/setpriv",
                                   "--bounding-set=-ipc_lock", "--inh-caps=-ipc_lock", smbctl_path(), "doctor",
                                   "--json", "--capacity", "1G"};
  if (verbs) args.insert(args.end(), {"--transport", "verbs"});
  const auto r = run_tool("/usr/bin/prlimit", args);
  ASSERT_FALSE(r.timed_out) << r.describe();
  const auto doc = parse(r);
  const auto files = findings(doc, "this host", "open files");
  ASSERT_EQ(files.size(), 1u) << r.describe();
  EXPECT_EQ(files[0].value("level", ""), "warn") << r.out;
  EXPECT_NE(files[0].value("detail", "").find("256"), std::string::npos) << r.out;
  EXPECT_NE(files[0].value("fix", "").find("ulimit -n"), std::string::npos) << r.out;
  const auto pages = findings(doc, "this host", "huge pages");
  ASSERT_EQ(pages.size(), 1u) << r.out;
  EXPECT_NE(pages[0].value("detail", "").find("1.0 GiB"), std::string::npos) << "checked against --capacity\n" << r.out;
  if (!verbs) GTEST_SKIP() << "the memlock check against a pinned pool needs the verbs transport (rdma-core)";
  const auto lock = findings(doc, "this host", "memlock");
  ASSERT_EQ(lock.size(), 1u) << r.out;
  EXPECT_EQ(lock[0].value("level", ""), "fail") << r.out;
  EXPECT_NE(lock[0].value("detail", "").find("ENOMEM"), std::string::npos) << r.out;
  EXPECT_NE(lock[0].value("fix", "").find("ulimit -l unlimited"), std::string::npos) << r.out;
  EXPECT_EQ(r.status.code, 3) << "a limit that blocks gives exit 3\n" << r.describe();
}

}  // namespace
