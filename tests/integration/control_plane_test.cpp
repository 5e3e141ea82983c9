// Control plane against real daemons: buffers are created, found by name from
// another client, accounted per server, and released by destroy, close or
// disconnect. No data moves here, so these pass whatever the data path does.
#include "fabric.hpp"
#include "raw_connection.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <thread>

namespace {

using namespace smb::test;

class ControlPlaneTest : public FabricTest {
 protected:
  static std::uint64_t round_up(std::uint64_t n) { return (n + 4095) / 4096 * 4096; }

  // Server address -> status, from `client`.
  static std::map<std::string, smb::ServerStatus> status_by_server(smb::Client& client) {
    std::map<std::string, smb::ServerStatus> out;
    for (auto& s : client.status()) out[s.address] = s;
    return out;
  }

  static const smb::BufferSummary* find_buffer(const smb::ServerStatus& s, const std::string& name) {
    for (const auto& b : s.buffers)
      if (b.name == name) return &b;
    return nullptr;
  }
};

TEST_P(ControlPlaneTest, CreatedBufferIsFoundByNameFromAnotherClient) {
  auto creator = make_client();
  auto other = make_client();
  const std::uint64_t size = 3 * 4096 * 4 + 100;
  smb::BufferOptions options;
  options.stripe_unit = 4096;
  auto created = creator.create("weights", size, options);
  const auto& layout = created.layout();
  EXPECT_EQ(layout.size, size);
  EXPECT_EQ(layout.stripe_unit, 4096u);
  ASSERT_EQ(layout.servers.size(), static_cast<std::size_t>(server_count()));
  auto sorted = addresses();
  std::sort(sorted.begin(), sorted.end());
  auto layout_servers = layout.servers;
  std::sort(layout_servers.begin(), layout_servers.end());
  EXPECT_EQ(layout_servers, sorted) << "striped over all servers by default";
  std::uint64_t sum = 0;
  for (auto s : layout.shares) sum += s;
  EXPECT_EQ(sum, size);

  auto opened = other.open("weights");
  EXPECT_EQ(opened.size(), size);
  EXPECT_EQ(opened.layout().servers, layout.servers);
  EXPECT_EQ(opened.layout().shares, layout.shares);
  EXPECT_EQ(other.info("weights").shares, layout.shares);
  const auto listed = other.list();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].name, "weights");
}

TEST_P(ControlPlaneTest, DestroyFreesTheNameAtOnce) {
  auto a = make_client();
  auto b = make_client();
  auto held = a.create("scratch", 64 * 1024);
  b.destroy("scratch");
  try {
    b.open("scratch");
    ADD_FAILURE() << "a destroyed buffer could still be opened";
  } catch (const smb::Error& e) {
    EXPECT_EQ(e.code(), smb::Errc::not_found) << e.what();
  }
  EXPECT_TRUE(a.list().empty());
  auto again = b.create("scratch", 8 * 1024);  // the name is free even though `held` is open
  EXPECT_EQ(a.open("scratch").size(), 8u * 1024);
}

TEST_P(ControlPlaneTest, StatusShowsEachServersShare) {
  auto client = make_client();
  const std::uint64_t size = 3ull << 20;  // default 1 MiB stripes: 3/N MiB per server
  auto buffer = client.create("model", size);
  const auto& layout = buffer.layout();
  auto status = status_by_server(client);
  ASSERT_EQ(status.size(), static_cast<std::size_t>(server_count()));
  for (std::size_t i = 0; i < layout.servers.size(); ++i) {
    const auto& s = status.at(layout.servers[i]);
    EXPECT_EQ(layout.shares[i], size / static_cast<std::uint64_t>(server_count()));
    EXPECT_EQ(s.used, round_up(layout.shares[i])) << s.address;
    EXPECT_EQ(s.capacity, 64u << 20) << s.address;
    EXPECT_EQ(s.transport, fabric_transport());
    EXPECT_GE(s.clients, 1u);
    const auto* b = find_buffer(s, "model");
    ASSERT_NE(b, nullptr) << s.address << " does not list the buffer";
    EXPECT_EQ(b->bytes, layout.shares[i]);
    EXPECT_EQ(b->open_handles, 1u);
  }
}

TEST_P(ControlPlaneTest, MemoryReturnsWhenTheLastHandleCloses) {
  auto a = make_client();
  auto b = make_client();
  auto mine = a.create("temp", 1 << 20);
  auto theirs = b.open("temp");
  for (const auto& [addr, s] : status_by_server(a))
    if (const auto* buf = find_buffer(s, "temp")) {
      EXPECT_EQ(buf->open_handles, 2u) << addr;
    }
  a.destroy("temp");
  mine.close();
  for (const auto& [addr, s] : status_by_server(a)) {
    EXPECT_EQ(find_buffer(s, "temp"), nullptr) << addr << ": destroyed buffers are not listed";
  }
  std::uint64_t used = 0;
  for (const auto& [addr, s] : status_by_server(a)) used += s.used;
  EXPECT_GT(used, 0u) << "memory must stay while another client still has the buffer open";
  theirs.close();
  for (const auto& [addr, s] : status_by_server(a)) EXPECT_EQ(s.used, 0u) << addr;
}

TEST_P(ControlPlaneTest, DisconnectedClientsHandlesAreReleased) {
  auto client = make_client();
  auto buffer = client.create("shared", 4096);
  const auto holder = buffer.layout().servers[0];  // holds the first (only) stripe
  {
    RawConnection raw(holder);  // a client that opens a handle and then vanishes
    ASSERT_TRUE(raw.hello(fabric_transport()));
    ASSERT_TRUE(raw.send(msgpack_frame(6 /* open_segment */, 1, {{"name", "shared"}})));
    auto reply = raw.receive();
    ASSERT_TRUE(reply.has_value());
    ASSERT_TRUE(reply->body.is_object());
    EXPECT_EQ(reply->body.value("ok", false), true) << reply->body.dump();
    EXPECT_EQ(find_buffer(status_by_server(client).at(holder), "shared")->open_handles, 2u);
  }
  // The daemon notices the closed socket asynchronously.
  std::uint32_t handles = 0;
  for (int i = 0; i < 100; ++i) {
    handles = find_buffer(status_by_server(client).at(holder), "shared")->open_handles;
    if (handles == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(handles, 1u) << "the vanished client's handle was not released";
}

TEST_P(ControlPlaneTest, ConcurrentOpenOrCreateMakesOneBuffer) {
  constexpr int kThreads = 4;
  std::vector<std::string> errors(kThreads);
  std::vector<smb::Layout> layouts(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        auto client = make_client();
        smb::BufferOptions options;
        options.stripe_unit = 4096;
        layouts[static_cast<std::size_t>(t)] = client.open_or_create("rendezvous", 5 * 4096 + 8, options).layout();
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(t)] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[static_cast<std::size_t>(t)], "") << "thread " << t;
    EXPECT_EQ(layouts[static_cast<std::size_t>(t)].shares, layouts[0].shares) << "thread " << t;
  }
  auto client = make_client();
  EXPECT_EQ(client.list().size(), 1u);
}

TEST_P(ControlPlaneTest, BufferCanBePlacedOnChosenServers) {
  auto client = make_client();
  const auto chosen = addresses().back();
  smb::BufferOptions options;
  options.servers = {chosen};
  auto buffer = client.create("pinned", 100000, options);
  ASSERT_EQ(buffer.layout().servers, std::vector<std::string>{chosen});
  for (const auto& [addr, s] : status_by_server(client))
    EXPECT_EQ(s.used, addr == chosen ? round_up(100000) : 0u) << addr;
}

INSTANTIATE_TEST_SUITE_P(Fabrics, ControlPlaneTest, testing::ValuesIn(all_fabrics()), fabric_name);

}  // namespace
