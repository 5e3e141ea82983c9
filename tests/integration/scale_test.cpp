// Ordinary use at scale: 20,000 buffers with long names over two servers.
// Before, `smbctl status` and `smbctl ls` ended the daemon (their replies
// passed the frame limit), and every buffer cost a SysV segment and a
// descriptor on the host. Now listings page, the pool is registered once,
// and destroying everything gives every byte and descriptor back.
#include "fabric.hpp"
#include "process.hpp"
#include "server_waits.hpp"
#include "smbd_process.hpp"

#include <smb/client.hpp>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <thread>

namespace {

using namespace smb::test;
using namespace std::chrono_literals;

constexpr int kBuffers = 20'000;

std::string name_of(int i) {
  std::string name = "scale-" + std::to_string(i) + "-";
  name.resize(150, 'x');  // long names: each listing of them passes 1 MiB unpaged
  return name;
}

// SysV shared-memory segments that `pid` created.
int sysv_segments_of(pid_t pid) {
  std::ifstream table("/proc/sysvipc/shm");
  std::string line;
  std::getline(table, line);  // header: key shmid perms size cpid ...
  int count = 0;
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string key, shmid, perms, size;
    pid_t cpid = 0;
    fields >> key >> shmid >> perms >> size >> cpid;
    count += cpid == pid ? 1 : 0;
  }
  return count;
}

TEST(ScaleTest, TwentyThousandBuffersOverTwoServers) {
  SmbdOptions options;
  options.capacity = "256M";
  SmbdProcess a(options), b(options);
  const std::string servers = a.address() + "," + b.address();
  smb::ClientOptions client_options;
  client_options.servers = {a.address(), b.address()};
  smb::Client client(client_options);
  client.create("warm-up", 8192).close();  // first use: lanes, caches
  client.destroy("warm-up");
  ASSERT_TRUE(pools_in_place(client));  // smbd faults its pool in behind its first answers
  const auto a_start = a.usage(), b_start = b.usage();
  const int a_segments = sysv_segments_of(a.pid());

  smb::BufferOptions two_stripes;
  two_stripes.stripe_unit = 4096;
  for (int i = 0; i < kBuffers; ++i) client.create(name_of(i), 8192, two_stripes);  // handles close at once

  EXPECT_EQ(sysv_segments_of(a.pid()), a_segments) << "a SysV segment per buffer";
  EXPECT_LE(a.usage().open_fds, a_start.open_fds + 2) << "a descriptor per buffer";

  const auto status = run_tool(smbctl_path(), {"--servers", servers, "--json", "status"}, 120s);
  ASSERT_TRUE(status.status.success()) << status.describe().substr(0, 4000);
  const auto doc = nlohmann::json::parse(status.out);
  ASSERT_EQ(doc.at("servers").size(), 2u);
  for (const auto& server : doc.at("servers")) {
    EXPECT_EQ(server.at("buffers").size(), static_cast<std::size_t>(kBuffers)) << server.at("address");
    EXPECT_EQ(server.at("used").get<std::uint64_t>(), std::uint64_t{kBuffers} * 4096);
  }
  const auto ls = run_tool(smbctl_path(), {"--servers", servers, "--json", "ls"}, 120s);
  ASSERT_TRUE(ls.status.success()) << ls.describe().substr(0, 4000);
  const auto listed = nlohmann::json::parse(ls.out).at("buffers");
  ASSERT_EQ(listed.size(), static_cast<std::size_t>(kBuffers));
  std::set<std::string> names;
  for (const auto& l : listed) {
    names.insert(l.at("name").get<std::string>());
    EXPECT_EQ(l.at("size").get<std::uint64_t>(), 8192u);
  }
  EXPECT_EQ(names.size(), static_cast<std::size_t>(kBuffers)) << "each buffer listed once";
  EXPECT_TRUE(names.contains(name_of(0)) && names.contains(name_of(kBuffers - 1)));
  const auto table = run_tool(smbctl_path(), {"--servers", servers, "status"}, 120s);
  EXPECT_TRUE(table.status.success()) << table.describe().substr(0, 4000);
  EXPECT_NE(table.out.find(name_of(kBuffers - 1)), std::string::npos);

  for (int i = 0; i < kBuffers; ++i) client.destroy(name_of(i));
  for (const auto& s : client.status()) {
    EXPECT_EQ(s.used, 0u) << s.address;
    EXPECT_TRUE(s.buffers.empty()) << s.address;
  }
  EXPECT_TRUE(client.list().empty());
  EXPECT_TRUE(a.running() && b.running());
  for (auto [server, start] : {std::pair{&a, a_start}, std::pair{&b, b_start}}) {
    const auto end = server->usage();
    EXPECT_LE(end.open_fds, start.open_fds + 2) << server->address();
    // The pool was whole at the start; what grows is bookkeeping, freed again.
    if (kRssIsMeaningful) {
      EXPECT_LE(end.rss_bytes, start.rss_bytes + (64u << 20)) << server->address();
    }
  }
}

}  // namespace
