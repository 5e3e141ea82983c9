#pragma once
// The fixture of the integration tests: fresh smbd processes on loopback,
// started under one transport, plus clients and tools pointed at them.
//
// The parameter picks the transport and the number of servers. Tests are
// instantiated over every transport this build has (SMB_TRANSPORTS in
// smb/config.h); one that cannot run here is skipped, saying why:
//   ucx_shm  UCX, UCX_TLS unset: UCX's default choice, shared memory/CMA
//            between processes of one host; data protocol automatic.
//   ucx_tcp  UCX, UCX_TLS=tcp,self for the test process and every smbd and
//            tool it starts, so the data really crosses TCP (libsmb's
//            active-message protocol).
//   NAME     any other transport: smbd --transport NAME, SMB_TRANSPORT=NAME,
//            on 127.0.0.1, or on $SMB_TEST_<NAME>_ADDRESS where that is set.
//            verbs needs an RDMA interface's address there (or in
//            $SMB_TEST_NATIVE_VERBS, which the soft-RoCE suite sets in its
//            VM) and is skipped without one.
// Every test gets its own servers, so buffer names never collide across
// tests and a daemon a test breaks cannot affect another.
#include "process.hpp"
#include "scoped_env.hpp"
#include "smbd_process.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace smb::test {

struct FabricParam {
  std::string transport = "ucx";  // smbd --transport / SMB_TRANSPORT
  std::string label = "ucx_shm";  // test-name part: ucx_shm, ucx_tcp, or the transport's name
  const char* ucx_tls = nullptr;  // UCX_TLS for the fabric (nullptr: unset)
  int servers = 1;
};

// UCX over shared memory with `servers` servers.
FabricParam ucx_shm_fabric(int servers);
// How gtest prints a parameter in failure messages ("ucx_tcp, 3 servers").
void PrintTo(const FabricParam& param, std::ostream* out);

// Every transport of this build x {1, 3 servers}.
std::vector<FabricParam> all_fabrics();
// Every transport x {3 servers}: tests about striping over, or losing, one of several servers.
std::vector<FabricParam> multi_server_fabrics();
// Test-name suffix such as "ucx_tcp_3servers".
std::string fabric_name(const testing::TestParamInfo<FabricParam>& info);

const std::string& smbctl_path();
const std::string& smb_bench_path();
// smb_test_raw_call (raw_call_main.cpp): one hand-made vector_call to one server.
const std::string& raw_call_path();

class FabricTest : public testing::TestWithParam<FabricParam> {
 protected:
  // Short, so that a broken data path fails a test in seconds, not minutes.
  static constexpr std::chrono::milliseconds kTimeout{5000};

  void SetUp() override;
  void TearDown() override;

  int server_count() const { return GetParam().servers; }
  // The transport the fabric's daemons serve: "ucx" or "verbs".
  std::string fabric_transport() const { return GetParam().transport; }
  SmbdProcess& server(std::size_t index) { return *servers_.at(index); }
  // Kills server `index` (if it still runs) and starts a fresh, empty smbd
  // on the same address: a crashed server that came back.
  void restart_server(std::size_t index);
  // A new, empty smbd started as the fabric's are, on a port of its own and
  // in no list: a replacement machine (Client::replace_server).
  std::unique_ptr<SmbdProcess> start_spare() const;
  std::vector<std::string> addresses() const;
  // The addresses in the order libsmb places names by (sorted), and the
  // index of the server at `address`.
  std::vector<std::string> sorted_addresses() const;
  std::size_t index_of(const std::string& address) const;
  std::string server_list() const;  // "h:p,h:p", as --servers takes it

  ClientOptions client_options(std::chrono::milliseconds timeout = kTimeout) const;
  Client make_client(std::chrono::milliseconds timeout = kTimeout) const;

  // smb-bench / smbctl with "--servers <this fabric>" put in front of `args`.
  ToolResult run_bench(const std::vector<std::string>& args) const;
  ToolResult run_smbctl(const std::vector<std::string>& args) const;

 private:
  ScopedEnv env_;  // first member: restored only after the servers are gone
  SmbdOptions daemon_;  // how the servers were started
  std::vector<std::unique_ptr<SmbdProcess>> servers_;
};

}  // namespace smb::test
