// smbd as a service (deploy/systemd/, deploy/smbd.toml, docs/operations.md):
// its TOML config is checked strictly (--check-config names the line of a
// mistake; smbd refuses to start on one), the example config documents
// every option, SIGHUP reopens the log and reloads the log level and the
// auth secret while clients are served, and the service manager is told
// READY / RELOADING / STOPPING and watchdog pings over a real $NOTIFY_SOCKET;
// smbd answers before its pool is faulted in, and READY waits for it.
#include "expect_error.hpp"
#include "process.hpp"
#include "scoped_env.hpp"
#include "smbd_process.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <span>
#include <sstream>
#include <thread>
#include <vector>

namespace {

using namespace smb::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Polls `done` for up to `timeout`.
template <typename F>
bool eventually(F done, std::chrono::milliseconds timeout = 10s) {
  for (const auto end = std::chrono::steady_clock::now() + timeout; std::chrono::steady_clock::now() < end;) {
    if (done()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return done();
}

class SmbdServiceTest : public testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/smb-service-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    env_.unset("SMB_AUTH_TOKEN_FILE");
    env_.unset("NOTIFY_SOCKET");
    env_.unset("WATCHDOG_USEC");
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text, mode_t mode = 0600) const {
    const auto path = dir_ / name;
    std::ofstream(path) << text;
    ::chmod(path.c_str(), mode);
    return path;
  }

  ToolResult check(const std::string& file) const { return run_tool(smbd_path(), {"--check-config", file}, 30s); }

  smb::Client client(const std::string& address, const std::string& secret_file,
                     const std::string& transport = "") const {
    smb::ClientOptions options;
    options.servers = {address};
    options.transport = transport;
    options.timeout = 5s;
    options.auth_token_file = secret_file;
    return smb::Client(options);
  }

  fs::path dir_;
  ScopedEnv env_;
};

TEST_F(SmbdServiceTest, CheckConfigAcceptsAValidFile) {
  const auto file = write("ok.toml", "capacity = \"64M\"\nlisten = \"127.0.0.1:0\"\npoll = true\nhello-timeout = 2.5\n");
  const auto r = check(file);
  EXPECT_TRUE(r.status.success()) << r.describe();
  EXPECT_NE(r.out.find("valid"), std::string::npos) << r.describe();
  EXPECT_NE(r.out.find("64.0 MiB"), std::string::npos) << r.describe();
}

TEST_F(SmbdServiceTest, CheckConfigNamesWhatIsWrongAndWhere) {
  struct Case {
    std::string text, expected;
  };
  const std::vector<Case> cases = {
      {"capacity = [1,2\n", "line 1"},  // CLI11's own reader took this as a value
      {"capacity = \"64M\"\ncapcity = \"1G\"\n", "unknown key 'capcity'"},
      {"[limits]\ncapacity = \"64M\"\n", "[limits] is a section"},
      {"capacity = [\"64M\", \"1G\"]\n", "'capacity' is a list"},
      {"capacity = \"64M\"\nlisten = \"127.0.0.1:0\"\nlisten = \"127.0.0.1:1\"\n", "line 3"},  // a duplicate key
      {"listen = \"127.0.0.1:0\"\n", "--capacity is required"},
      {"capacity = \"12Q\"\n", "12Q"},
      {"capacity = \"64M\"\nspin-us = -4\n", "spin-us"},
      {"capacity = \"64M\"\nhello-timeout = 0\n", "--hello-timeout"},
      {"capacity = \"64M\"\nlog-level = \"loud\"\n", "log-level"},
      {"capacity = \"64M\"\nauth-token-file = \"/nonexistent/token\"\n", "/nonexistent/token"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto file = write("bad" + std::to_string(i) + ".toml", cases[i].text);
    const auto r = check(file);
    EXPECT_TRUE(r.status.exited && r.status.code == 1) << cases[i].text << r.describe();
    EXPECT_NE(r.err.find(file), std::string::npos) << "should name the file: " << r.describe();
    EXPECT_EQ(r.err.find("--help"), std::string::npos) << "a hint about flags, for a file: " << r.describe();
    EXPECT_NE(r.err.find(cases[i].expected), std::string::npos) << cases[i].text << r.describe();
    EXPECT_EQ(r.out.find("valid"), std::string::npos) << r.describe();
  }
  const auto missing = check((dir_ / "missing.toml").string());
  EXPECT_TRUE(missing.status.exited && missing.status.code != 0) << missing.describe();
  EXPECT_NE(missing.err.find("missing.toml"), std::string::npos) << missing.describe();
}

// The daemon reads the file the same way: it does not start on a mistake,
// starts on a good file, and a flag on the command line wins over the file.
TEST_F(SmbdServiceTest, SmbdRunsFromItsConfigFile) {
  const auto bad = write("bad.toml", "capacity = \"64M\"\nlisten = \"127.0.0.1:0\"\ncapcity = \"1G\"\n");
  const auto refused = run_tool(smbd_path(), {"--config", bad}, 30s);
  EXPECT_TRUE(refused.status.exited && refused.status.code != 0) << refused.describe();
  EXPECT_EQ(refused.out.find("smbd ready"), std::string::npos) << refused.describe();

  const auto good = write("good.toml", "capacity = \"1G\"\nlisten = \"127.0.0.1:1\"\n");
  SmbdOptions options;  // --listen 127.0.0.1:0 --capacity 64M on the command line, then the file
  options.extra_args = {"--config", good};
  SmbdProcess smbd(options);
  EXPECT_NE(smbd.address(), "127.0.0.1:1") << "the command line's --listen wins";
  const auto status = client(smbd.address(), "").status();
  ASSERT_EQ(status.size(), 1u);
  EXPECT_EQ(status[0].capacity, 64u << 20) << "the command line's --capacity wins";
}

// deploy/smbd.toml, installed as /etc/smb/smbd.toml: valid as shipped, it
// mentions every option smbd has, and with every commented key switched on
// it is still valid.
TEST_F(SmbdServiceTest, TheExampleConfigCoversEveryOption) {
  const fs::path example = fs::path(SMB_TEST_SOURCE_DIR) / "deploy" / "smbd.toml";
  const auto shipped = check(example);
  EXPECT_TRUE(shipped.status.success()) << shipped.describe();

  const auto help = run_tool(smbd_path(), {"--help"}, 30s);
  ASSERT_TRUE(help.status.success()) << help.describe();
  std::set<std::string> flags;
  const std::regex flag(R"(^\s+(?:-\w,)?--([a-z][a-z0-9-]*))");
  std::istringstream lines(help.out);
  for (std::string line; std::getline(lines, line);)
    if (std::smatch m; std::regex_search(line, m, flag)) flags.insert(m[1]);
  for (const auto* not_a_key : {"help", "config", "check-config"}) flags.erase(not_a_key);
  ASSERT_GE(flags.size(), 10u) << help.out;

  std::string all = slurp(example);
  for (const auto& key : flags)
    EXPECT_TRUE(std::regex_search(all, std::regex("(^|\n)#?" + key + " = "))) << "deploy/smbd.toml lacks " << key;
  all = std::regex_replace(all, std::regex("(^|\n)#([a-z][a-z0-9-]* = )"), "$1$2");
  all = std::regex_replace(all, std::regex("\"/etc/smb/token\""), "\"" + write("token", "a secret\n") + "\"");
  all = std::regex_replace(all, std::regex("\"/var/log/smb/smbd.log\""), "\"" + (dir_ / "smbd.log").string() + "\"");
  // The example's transport-option is tcp's (UCX, the default transport, takes none in smbd).
  all = std::regex_replace(all, std::regex("(^|\n)transport = \"ucx\""), "$1transport = \"tcp\"");
  const auto every = check(write("every.toml", all));
  EXPECT_TRUE(every.status.success()) << all << every.describe();
}

// logrotate moves the file away and sends SIGHUP: smbd goes on in a new
// file, serving clients all along.
TEST_F(SmbdServiceTest, HangupReopensTheLogFile) {
  const auto log = dir_ / "smbd.log";
  SmbdOptions options;
  options.extra_args = {"--log-file", log.string()};
  SmbdProcess smbd(options);
  ASSERT_TRUE(eventually([&] { return slurp(log).find("pool of") != std::string::npos; })) << slurp(log);
  EXPECT_EQ(smbd.log().find("pool of"), std::string::npos) << "the log went to the file, not stderr";

  fs::rename(log, dir_ / "smbd.log.1");
  ASSERT_EQ(::kill(smbd.pid(), SIGHUP), 0);
  ASSERT_TRUE(eventually([&] { return slurp(log).find("log reopened") != std::string::npos; }))
      << "no new log after SIGHUP\n" << smbd.log();
  auto c = client(smbd.address(), "");
  c.create("after-rotation", 4096);
  EXPECT_EQ(c.open("after-rotation").size(), 4096u);
  EXPECT_TRUE(smbd.running());

  const auto not_a_directory = write("a-file", "");
  const auto unwritable = run_tool(smbd_path(), {"--capacity", "64M", "--listen", "127.0.0.1:0", "--log-file",
                                                 not_a_directory + "/smbd.log"}, 30s);
  EXPECT_TRUE(unwritable.status.exited && unwritable.status.code != 0) << unwritable.describe();
  EXPECT_NE(unwritable.err.find("--log-file"), std::string::npos) << unwritable.describe();
}

// `systemctl reload smbd`: the log level and the auth secret change for new
// connections without a restart; a key that needs one is logged as such; a
// config broken meanwhile changes nothing.
TEST_F(SmbdServiceTest, HangupReloadsTheLogLevelAndTheSecret) {
  const auto token = write("token", "first secret\n");
  const auto log = dir_ / "smbd.log";
  const auto config_text = [&](const std::string& level, const std::string& spin_us) {
    return "spin-us = " + spin_us + "\nlog-level = \"" + level +
           "\"\nauth-token-file = \"" + token + "\"\nlog-file = \"" + log.string() + "\"\n";
  };
  const auto config = write("smbd.toml", config_text("info", "50"));
  const auto old_token = write("old-token", "first secret\n");
  SmbdOptions options;
  options.extra_args = {"--config", config};
  SmbdProcess smbd(options);
  client(smbd.address(), token).create("kept", 4096);

  write("token", "second secret\n");
  write("smbd.toml", config_text("debug", "20"));
  ASSERT_EQ(::kill(smbd.pid(), SIGHUP), 0);
  // Each line as it comes: the reload writes them one after another, and a
  // read between two of them once failed here (ASan build, CI pre-run).
  for (const char* line : {"the new secret", "log level now debug",
                           "'spin-us' changed; it takes effect at the next restart"})
    ASSERT_TRUE(eventually([&] { return slurp(log).find(line) != std::string::npos; })) << line << "\n" << slurp(log);

  expect_errc(smb::Errc::permission_denied, [&] { client(smbd.address(), old_token); }, "the rotated-out secret");
  EXPECT_EQ(client(smbd.address(), token).open("kept").size(), 4096u) << "the new secret is served";

  write("smbd.toml", "capacity = [1,2\n");
  ASSERT_EQ(::kill(smbd.pid(), SIGHUP), 0);
  ASSERT_TRUE(eventually([&] { return slurp(log).find("no longer parse") != std::string::npos; })) << slurp(log);
  EXPECT_EQ(client(smbd.address(), token).open("kept").size(), 4096u) << "a broken config changed nothing";
  EXPECT_TRUE(smbd.running());
}

// A real $NOTIFY_SOCKET, as systemd gives a Type=notify service.
class NotifySocket {
 public:
  explicit NotifySocket(const fs::path& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", path.c_str());
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0)
      throw std::runtime_error("cannot bind " + path.string());
    timeval wait{0, 100'000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  }
  ~NotifySocket() { ::close(fd_); }
  // Reads messages until one contains `state` (or the time is up); keeps all.
  bool saw(const std::string& state, std::chrono::milliseconds timeout = 10s) {
    return eventually(
        [&] {
          char message[4096];
          const auto n = ::recv(fd_, message, sizeof(message), 0);
          if (n > 0) messages_.emplace_back(message, static_cast<std::size_t>(n));
          for (const auto& m : messages_)
            if (m.find(state) != std::string::npos) return true;
          return false;
        },
        timeout);
  }
  void forget() { messages_.clear(); }
  std::string all() const {
    std::string text;
    for (const auto& m : messages_) text += "[" + m + "] ";
    return text;
  }

 private:
  fs::path path_;
  int fd_ = -1;
  std::vector<std::string> messages_;
};

TEST_F(SmbdServiceTest, TellsTheServiceManagerHowItIsDoing) {
#if !SMB_TEST_WITH_SYSTEMD
  GTEST_SKIP() << "smbd was built without libsystemd (install libsystemd-dev): it sends no notifications";
#endif
  NotifySocket manager(dir_ / "notify");
  env_.set("NOTIFY_SOCKET", (dir_ / "notify").string());
  env_.set("WATCHDOG_USEC", "200000");
  SmbdProcess smbd;
  EXPECT_TRUE(manager.saw("READY=1")) << manager.all();
  EXPECT_TRUE(manager.saw("STATUS=serving 64.0 MiB on " + smbd.address())) << manager.all();
  manager.forget();
  EXPECT_TRUE(manager.saw("WATCHDOG=1", 2s)) << "pings every WatchdogSec/2: " << manager.all();

  ASSERT_EQ(::kill(smbd.pid(), SIGHUP), 0);
  EXPECT_TRUE(manager.saw("RELOADING=1")) << manager.all();
  manager.forget();
  EXPECT_TRUE(manager.saw("READY=1")) << "ready again after the reload: " << manager.all();

  const auto status = smbd.terminate(10s);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(status->success()) << status->describe();
  EXPECT_TRUE(manager.saw("STOPPING=1", 2s)) << manager.all();
}


// smbd answers at once whatever its --capacity and faults its pool in
// behind (issue 37: 256 MiB-1 GiB took 11-15 s on a busy host when the
// pool came first, and scripts that gave smbd 2 s failed). While the pool
// fills: `stat` says how far it got, a buffer made meanwhile holds its bytes
// (the populator never writes a page), and the service manager hears a
// progress STATUS but no READY; READY comes once the pool is whole, and the
// daemon then holds it all.
class SmbdStartTest : public SmbdServiceTest, public testing::WithParamInterface<std::string> {};

TEST_P(SmbdStartTest, AnswersBeforeItsPoolIsWholeAndLosesNothingWhileItFills) {
  constexpr std::uint64_t kCapacity = 2ull << 30;  // some 3 s of faults here: the first stat comes well before
  const bool notifies = SMB_TEST_WITH_SYSTEMD;
  NotifySocket manager(dir_ / "notify");
  env_.set("NOTIFY_SOCKET", (dir_ / "notify").string());
  SmbdOptions options;
  options.capacity = "2G";
  options.extra_args = {"--transport", GetParam()};
  SmbdProcess smbd(options);

  auto c = client(smbd.address(), "", GetParam());
  const auto first = c.status();
  ASSERT_EQ(first.size(), 1u);
  ASSERT_TRUE(first[0].reachable) << first[0].error;
  EXPECT_EQ(first[0].capacity, kCapacity);
  EXPECT_LT(first[0].populated, kCapacity) << "answered only once the pool was whole";
  if (notifies) {
    EXPECT_TRUE(manager.saw("faulting in the pool")) << manager.all();
    EXPECT_FALSE(manager.saw("READY=1", 0ms)) << "READY before the pool is whole: " << manager.all();
  }

  // A buffer made and written while the pool fills keeps every byte.
  constexpr std::size_t kBytes = 64u << 20;
  std::vector<std::uint32_t> pattern(kBytes / 4);
  for (std::size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<std::uint32_t>(i * 2654435761u);
  auto buffer = c.create("early", kBytes);
  buffer.write(0, std::as_bytes(std::span(pattern)));

  std::uint64_t populated = 0;
  ASSERT_TRUE(eventually(
      [&] {
        const auto now = c.status().at(0).populated;
        EXPECT_GE(now, populated) << "populated went backwards";
        populated = now;
        return now == kCapacity;
      },
      120s))
      << "the pool never became whole: " << populated << " of " << kCapacity << "\n" << smbd.log();
  if (notifies) {
    EXPECT_TRUE(manager.saw("READY=1")) << manager.all();
    EXPECT_TRUE(manager.saw("STATUS=serving 2.0 GiB on " + smbd.address())) << manager.all();
  }
  EXPECT_TRUE(eventually([&] { return smbd.log().find("pool of 2.0 GiB in place after") != std::string::npos; }))
      << smbd.log();

  std::vector<std::uint32_t> back(pattern.size());
  buffer.read(0, std::as_writable_bytes(std::span(back)));
  EXPECT_TRUE(back == pattern) << "the populator changed bytes a client had written";
  if (kRssIsMeaningful) {
    EXPECT_GE(smbd.usage().rss_bytes, kCapacity - (kCapacity >> 4)) << "the pool is said to be whole but is not resident";
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, SmbdStartTest, testing::Values("tcp", "ucx"),
                         [](const testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
