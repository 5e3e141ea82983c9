// The smbd command line and lifecycle, independent of any client: it
// announces where it listens, exits 0 on SIGTERM/SIGINT, and refuses bad
// flags, a port in use or impossible memory with a non-zero exit and a
// message saying what to do.
#include <smb/config.h>

#include "fabric.hpp"
#include "process.hpp"
#include "smbd_process.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <stdexcept>

namespace {

using namespace smb::test;
using namespace std::chrono_literals;

ToolResult run_smbd(const std::vector<std::string>& args) { return run_tool(smbd_path(), args, 30s); }

TEST(SmbdCli, AnnouncesAnOsChosenPort) {
  SmbdProcess smbd;
  EXPECT_EQ(smbd.address().rfind("127.0.0.1:", 0), 0u) << smbd.address();
  EXPECT_NE(smbd.address(), "127.0.0.1:0") << "the bound port, not the requested 0";
  EXPECT_TRUE(smbd.running());
}

// The harness itself: a daemon that never gets ready fails the test at once
// with the daemon's own complaint, instead of hanging or blaming the client.
TEST(SmbdCli, HarnessReportsADaemonThatNeverGetsReady) {
  SmbdOptions options;
  options.capacity = "12Q";
  try {
    SmbdProcess smbd(options);
    ADD_FAILURE() << "smbd --capacity 12Q became ready";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("before printing 'smbd ready on HOST:PORT'"), std::string::npos) << what;
    EXPECT_NE(what.find("12Q"), std::string::npos) << "should quote smbd's stderr: " << what;
  }
}

TEST(SmbdCli, SigtermExitsZero) {
  SmbdProcess smbd;
  const auto status = smbd.terminate(10s);
  ASSERT_TRUE(status.has_value()) << "smbd still running 10 s after SIGTERM\n" << smbd.log();
  EXPECT_TRUE(status->success()) << status->describe() << "\n" << smbd.log();
}

TEST(SmbdCli, SigintExitsZero) {
  SmbdProcess smbd;
  const auto status = smbd.signal_and_wait(SIGINT, 10s);
  ASSERT_TRUE(status.has_value()) << "smbd still running 10 s after SIGINT\n" << smbd.log();
  EXPECT_TRUE(status->success()) << status->describe() << "\n" << smbd.log();
}

TEST(SmbdCli, BadFlagsExitNonZeroWithAMessage) {
  const std::vector<std::vector<std::string>> cases = {
      {"--listen", "127.0.0.1:0", "--capacity", "64M", "--no-such-flag"},
      {"--listen", "127.0.0.1:0"},  // --capacity is required
      {"--listen", "127.0.0.1:0", "--capacity", "12Q"},
      {"--listen", "127.0.0.1:0", "--capacity", "0"},
      {"--listen", "not-an-address", "--capacity", "64M"},
      {"--listen", "127.0.0.1:99999", "--capacity", "64M"},
      {"--listen", "127.0.0.1:0", "--capacity", "64M", "--transport", "carrier-pigeon"},
  };
  for (const auto& args : cases) {
    const auto r = run_smbd(args);
    std::string line;
    for (const auto& a : args) line += a + " ";
    EXPECT_FALSE(r.timed_out) << line;
    EXPECT_TRUE(r.status.exited && r.status.code != 0) << line << "\n" << r.describe();
    EXPECT_FALSE(r.err.empty()) << line << ": no message on stderr";
    EXPECT_EQ(r.out.find("smbd ready"), std::string::npos) << line;
  }
}

// --poll (busy-polling progress) serves calls and atomics like the default:
// server-side accumulates verified, fetch-adds summed.
TEST(SmbdCli, PollModeServesCallsAndAtomics) {
  SmbdOptions options;
  options.extra_args = {"--poll"};
  SmbdProcess smbd(options);
  for (const std::vector<std::string>& op : {std::vector<std::string>{"--op", "accumulate", "--size", "64K",
                                                                      "--block", "4K", "--iters", "20"},
                                             std::vector<std::string>{"--op", "fetch-add", "--size", "4K",
                                                                      "--iters", "500", "--threads", "2"}}) {
    std::vector<std::string> args = {"--servers", smbd.address(), "--verify"};
    args.insert(args.end(), op.begin(), op.end());
    const auto r = run_tool(smb_bench_path(), args, 60s);
    EXPECT_TRUE(r.status.success()) << r.describe();
    EXPECT_NE(r.out.find("verify     ok"), std::string::npos) << r.out;
  }
  EXPECT_TRUE(smbd.running());
}

// --help lists every transport of this build (the same list libsmb uses).
TEST(SmbdCli, HelpListsTheTransportsBuilt) {
  const auto r = run_smbd({"--help"});
  EXPECT_TRUE(r.status.exited && r.status.code == 0) << r.describe();
  std::string transports = SMB_TRANSPORTS;
  for (std::size_t start = 0; start <= transports.size();) {
    auto end = std::min(transports.find(',', start), transports.size());
    const auto name = transports.substr(start, end - start);
    EXPECT_NE(r.out.find("  " + name + ": "), std::string::npos) << name << " missing from:\n" << r.out;
    start = end + 1;
  }
}

TEST(SmbdCli, PortInUseExitsNonZeroAndSaysSo) {
  SmbdProcess first;
  const auto r = run_smbd({"--listen", first.address(), "--capacity", "64M"});
  EXPECT_TRUE(r.status.exited && r.status.code != 0) << r.describe();
  EXPECT_NE(r.err.find("--listen"), std::string::npos) << "should say how to pick another port:\n" << r.err;
  EXPECT_TRUE(first.running()) << "the first daemon must be unaffected";
}

TEST(SmbdCli, MetricsPortInUseExitsNonZeroAndSaysSo) {
  SmbdProcess first;  // its control port is the busy one
  const auto r = run_smbd({"--listen", "127.0.0.1:0", "--capacity", "64M", "--metrics", first.address()});
  EXPECT_TRUE(r.status.exited && r.status.code != 0) << r.describe();
  const auto port = first.address().substr(first.address().rfind(':') + 1);
  EXPECT_NE(r.err.find("port " + port + " is in use"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("CivetServer"), std::string::npos) << "the HTTP library's words, not ours:\n" << r.err;
}

TEST(SmbdCli, CapacityBeyondTheMachineExitsNonZeroAndSaysSo) {
  const auto r = run_smbd({"--listen", "127.0.0.1:0", "--capacity", "64T"});
  EXPECT_TRUE(r.status.exited && r.status.code != 0) << r.describe();
  EXPECT_NE(r.err.find("--capacity"), std::string::npos) << "should say to lower --capacity:\n" << r.err;
}

}  // namespace
