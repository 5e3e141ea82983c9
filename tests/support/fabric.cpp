#include "fabric.hpp"

#include <smb/config.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <stdexcept>

namespace smb::test {

namespace {
// The fabrics of each transport of this build (SMB_TRANSPORTS in the public
// smb/config.h, e.g. "ucx,verbs"): UCX twice (shared memory, TCP), any other
// once, under its own name.
std::vector<FabricParam> fabric_kinds() {
  std::vector<FabricParam> out;
  const std::string built = SMB_TRANSPORTS;
  for (std::size_t start = 0; start <= built.size();) {
    const auto end = std::min(built.find(',', start), built.size());
    const std::string name = built.substr(start, end - start);
    start = end + 1;
    if (name == "ucx") {
      out.push_back({"ucx", "ucx_shm", nullptr, 1});
      out.push_back({"ucx", "ucx_tcp", "tcp,self", 1});
    } else if (!name.empty()) {
      out.push_back({name, name, nullptr, 1});
    }
  }
  return out;
}

// Where a non-UCX fabric's daemons listen: $SMB_TEST_<NAME>_ADDRESS, for
// verbs also $SMB_TEST_NATIVE_VERBS; else loopback, except for verbs (an
// RDMA interface is needed): empty.
std::string listen_host(const std::string& transport) {
  std::string variable = "SMB_TEST_";
  for (char c : transport) variable += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  variable += "_ADDRESS";
  for (const std::string& name : {variable, std::string(transport == "verbs" ? "SMB_TEST_NATIVE_VERBS" : "")}) {
    const char* value = name.empty() ? nullptr : std::getenv(name.c_str());
    if (value != nullptr && *value != '\0') return value;
  }
  return transport == "verbs" ? "" : "127.0.0.1";
}
}  // namespace

FabricParam ucx_shm_fabric(int servers) { return {"ucx", "ucx_shm", nullptr, servers}; }

std::vector<FabricParam> all_fabrics() {
  std::vector<FabricParam> out;
  for (auto kind : fabric_kinds())
    for (int servers : {1, 3}) {
      kind.servers = servers;
      out.push_back(kind);
    }
  return out;
}

std::vector<FabricParam> multi_server_fabrics() {
  std::vector<FabricParam> out;
  for (auto kind : fabric_kinds()) {
    kind.servers = 3;
    out.push_back(kind);
  }
  return out;
}

std::string fabric_name(const testing::TestParamInfo<FabricParam>& info) {
  return info.param.label + "_" + std::to_string(info.param.servers) +
         (info.param.servers == 1 ? "server" : "servers");
}

void PrintTo(const FabricParam& param, std::ostream* out) {
  *out << param.label << ", " << param.servers << " server(s)";
}

const std::string& smbctl_path() {
  static const std::string path = SMB_TEST_SMBCTL_PATH;
  return path;
}

const std::string& smb_bench_path() {
  static const std::string path = SMB_TEST_SMB_BENCH_PATH;
  return path;
}

const std::string& raw_call_path() {
  static const std::string path = SMB_TEST_RAW_CALL_PATH;
  return path;
}

void FabricTest::SetUp() {
  // The environment first: the daemons and tools inherit it when spawned.
  // Nothing from the caller's shell may redirect the tests elsewhere.
  for (const char* name : {"SMB_SERVERS", "SMB_TRANSPORT", "SMB_DATA_PROTOCOL", "UCX_TLS"}) env_.unset(name);
  SmbdOptions daemon;
  const auto& param = GetParam();
  if (param.ucx_tls != nullptr) env_.set("UCX_TLS", param.ucx_tls);
  if (param.transport != "ucx") {
    const auto host = listen_host(param.transport);
    if (host.empty())
      GTEST_SKIP() << param.transport << " fabric: needs an RDMA device; set SMB_TEST_NATIVE_VERBS to the IPv4 "
                   << "address of its interface (the soft-RoCE suite does, in its VM: tests/softroce/)";
    daemon.listen = host + ":0";
    daemon.extra_args = {"--transport", param.transport};
    env_.set("SMB_TRANSPORT", param.transport);
  }
  daemon_ = daemon;
  try {
    for (int i = 0; i < GetParam().servers; ++i) servers_.push_back(std::make_unique<SmbdProcess>(daemon));
  } catch (const std::exception& e) {
    GTEST_FAIL() << "could not start smbd: " << e.what();
  }
}

void FabricTest::restart_server(std::size_t index) {
  auto& slot = servers_.at(index);
  const std::string address = slot->address();
  slot->kill();
  SmbdOptions again = daemon_;
  again.listen = address;
  slot = std::make_unique<SmbdProcess>(again);  // throws with the daemon's log if it cannot start
}

std::unique_ptr<SmbdProcess> FabricTest::start_spare() const { return std::make_unique<SmbdProcess>(daemon_); }

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

std::vector<std::string> FabricTest::sorted_addresses() const {
  auto out = addresses();
  std::sort(out.begin(), out.end());
  return out;
}

std::size_t FabricTest::index_of(const std::string& address) const {
  for (std::size_t i = 0; i < servers_.size(); ++i)
    if (servers_[i]->address() == address) return i;
  throw std::invalid_argument("no server of this fabric at " + address);
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
