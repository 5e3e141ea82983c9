#pragma once
// The fixture of the integration tests: fresh smbd processes on loopback,
// started under one UCX data path, plus clients and tools pointed at them.
//
// The parameter picks the data path and the number of servers:
//   shm  UCX_TLS unset: UCX's default choice, shared memory/CMA between
//        processes of one host; data protocol automatic.
//   tcp  UCX_TLS=tcp,self for the test process and every smbd and tool it
//        starts, so the data really crosses TCP (RMA emulated, or libsmb's
//        active-message protocol when it chooses that).
// Every test gets its own servers, so buffer names never collide across
// tests and a daemon a test breaks cannot affect another.
//
// With SMB_TEST_NATIVE_VERBS=IP (set by the soft-RoCE suite in its VM), the
// shm fabrics run over the native verbs transport instead (fabric.cpp).
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

enum class DataPath { shm, tcp };

struct FabricParam {
  DataPath path = DataPath::shm;
  int servers = 1;
};

// How gtest prints a parameter in failure messages ("tcp, 3 servers").
void PrintTo(const FabricParam& param, std::ostream* out);

// {shm, tcp} x {1, 3 servers}.
std::vector<FabricParam> all_fabrics();
// {shm, tcp} x {3 servers}: tests about striping over, or losing, one of several servers.
std::vector<FabricParam> multi_server_fabrics();
// Test-name suffix such as "tcp_3servers".
std::string fabric_name(const testing::TestParamInfo<FabricParam>& info);

const std::string& smbctl_path();
const std::string& smb_bench_path();

class FabricTest : public testing::TestWithParam<FabricParam> {
 protected:
  // Short, so that a broken data path fails a test in seconds, not minutes.
  static constexpr std::chrono::milliseconds kTimeout{5000};

  void SetUp() override;
  void TearDown() override;

  int server_count() const { return GetParam().servers; }
  // The transport the fabric's daemons serve: "ucx", or "verbs" in native verbs mode.
  std::string fabric_transport() const { return native_verbs_ ? "verbs" : "ucx"; }
  SmbdProcess& server(std::size_t index) { return *servers_.at(index); }
  std::vector<std::string> addresses() const;
  std::string server_list() const;  // "h:p,h:p", as --servers takes it

  ClientOptions client_options(std::chrono::milliseconds timeout = kTimeout) const;
  Client make_client(std::chrono::milliseconds timeout = kTimeout) const;

  // smb-bench / smbctl with "--servers <this fabric>" put in front of `args`.
  ToolResult run_bench(const std::vector<std::string>& args) const;
  ToolResult run_smbctl(const std::vector<std::string>& args) const;

 private:
  ScopedEnv env_;  // first member: restored only after the servers are gone
  std::vector<std::unique_ptr<SmbdProcess>> servers_;
  bool native_verbs_ = false;
};

}  // namespace smb::test
