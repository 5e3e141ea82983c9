#include "fabric.hpp"

#include <cstdlib>
#include <stdexcept>

namespace smb::test {

std::vector<FabricParam> all_fabrics() {
  return {{DataPath::shm, 1}, {DataPath::shm, 3}, {DataPath::tcp, 1}, {DataPath::tcp, 3}};
}

std::vector<FabricParam> multi_server_fabrics() { return {{DataPath::shm, 3}, {DataPath::tcp, 3}}; }

std::string fabric_name(const testing::TestParamInfo<FabricParam>& info) {
  return std::string(info.param.path == DataPath::shm ? "shm" : "tcp") + "_" +
         std::to_string(info.param.servers) + (info.param.servers == 1 ? "server" : "servers");
}

void PrintTo(const FabricParam& param, std::ostream* out) {
  *out << (param.path == DataPath::shm ? "shm" : "tcp") << ", " << param.servers << " server(s)";
}

const std::string& smbctl_path() {
  static const std::string path = SMB_TEST_SMBCTL_PATH;
  return path;
}

const std::string& smb_bench_path() {
  static const std::string path = SMB_TEST_SMB_BENCH_PATH;
  return path;
}

void FabricTest::SetUp() {
  // The environment first: the daemons and tools inherit it when spawned.
  if (GetParam().path == DataPath::tcp)
    env_.set("UCX_TLS", "tcp,self");
  else
    env_.unset("UCX_TLS");
  // Nothing from the caller's shell may redirect the tests elsewhere.
  for (const char* name : {"SMB_SERVERS", "SMB_TRANSPORT", "SMB_DATA_PROTOCOL"}) env_.unset(name);

  // SMB_TEST_NATIVE_VERBS=IP (the soft-RoCE suite sets it in its VM): the
  // daemons serve the native verbs transport on the RDMA interface that has
  // address IP, and clients and tools follow. Only the shm fabrics run then;
  // the tcp ones would repeat them.
  SmbdOptions daemon;
  if (const char* ip = std::getenv("SMB_TEST_NATIVE_VERBS"); ip != nullptr && *ip != '\0') {
    if (GetParam().path == DataPath::tcp) GTEST_SKIP() << "native verbs mode (SMB_TEST_NATIVE_VERBS) runs the shm fabrics only";
    daemon.listen = std::string(ip) + ":0";
    daemon.extra_args = {"--transport", "verbs"};
    env_.set("SMB_TRANSPORT", "verbs");
    native_verbs_ = true;
  }
  try {
    for (int i = 0; i < GetParam().servers; ++i) servers_.push_back(std::make_unique<SmbdProcess>(daemon));
  } catch (const std::exception& e) {
    GTEST_FAIL() << "could not start smbd: " << e.what();
  }
}

void FabricTest::TearDown() {
  // The daemon must survive anything a client does: a server that died on
  // its own during the test fails it, with the daemon's log.
  for (auto& s : servers_) {
    if (!s->died_unexpectedly()) continue;
    std::string log = s->log();
    if (log.size() > 4000) log = "..." + log.substr(log.size() - 4000);
    ADD_FAILURE() << "smbd " << s->address() << " died during the test: " << s->exit_status()->describe()
                  << "\n--- smbd stderr ---\n" << log;
  }
  servers_.clear();  // kills and reaps the rest
}

std::vector<std::string> FabricTest::addresses() const {
  std::vector<std::string> out;
  for (const auto& s : servers_) out.push_back(s->address());
  return out;
}

std::string FabricTest::server_list() const {
  std::string out;
  for (const auto& s : servers_) out += (out.empty() ? "" : ",") + s->address();
  return out;
}

ClientOptions FabricTest::client_options(std::chrono::milliseconds timeout) const {
  ClientOptions options;
  options.servers = addresses();
  options.timeout = timeout;
  return options;
}

Client FabricTest::make_client(std::chrono::milliseconds timeout) const { return Client(client_options(timeout)); }

ToolResult FabricTest::run_bench(const std::vector<std::string>& args) const {
  std::vector<std::string> full = {"--servers", server_list()};
  full.insert(full.end(), args.begin(), args.end());
  return run_tool(smb_bench_path(), full);
}

ToolResult FabricTest::run_smbctl(const std::vector<std::string>& args) const {
  std::vector<std::string> full = {"--servers", server_list()};
  full.insert(full.end(), args.begin(), args.end());
  return run_tool(smbctl_path(), full);
}

}  // namespace smb::test
