// Ranking NICs by NUMA distance (host/numa.hpp): of several devices that
// reach a server, the one strictly nearest the memory wins; a tie, an
// unplaced device (soft-RoCE, virtual NICs) or an unknown distance leaves
// the choice to rdma_cm's route. And this host's sysfs reads are sane.
#include "host/numa.hpp"

#include <gtest/gtest.h>

#include <filesystem>

namespace {

using smb::host::nearest_device;

// Two sockets: 10 within a node, 21 across (a typical SLIT).
std::optional<int> two_sockets(int from, int to) { return from == to ? 10 : 21; }

TEST(NumaTest, TheDeviceOnTheMemorysNodeWins) {
  EXPECT_EQ(nearest_device({0, 1}, 1, two_sockets), 1u);
  EXPECT_EQ(nearest_device({0, 1}, 0, two_sockets), 0u);
  EXPECT_EQ(nearest_device({1, 1, 0}, 0, two_sockets), 2u);
}

TEST(NumaTest, ATieOrAnUnknownLeavesTheChoiceToTheRoute) {
  EXPECT_EQ(nearest_device({0, 0}, 0, two_sockets), std::nullopt) << "two devices on the memory's node";
  EXPECT_EQ(nearest_device({0, 0, 1}, 1, [](int, int) -> std::optional<int> { return 10; }), std::nullopt);
  EXPECT_EQ(nearest_device({0, std::nullopt}, 0, two_sockets), std::nullopt) << "an unplaced device";
  EXPECT_EQ(nearest_device({0, 1}, std::nullopt, two_sockets), std::nullopt) << "memory on no known node";
  EXPECT_EQ(nearest_device({0, 1}, 0, [](int, int) -> std::optional<int> { return std::nullopt; }), std::nullopt);
  EXPECT_EQ(nearest_device({0}, 0, two_sockets), std::nullopt) << "one device: nothing to rank";
}

TEST(NumaTest, ThisHostsNodesAndDistancesAreRead) {
  if (!std::filesystem::exists("/sys/devices/system/node/node0"))
    GTEST_SKIP() << "this kernel shows no NUMA nodes in sysfs (/sys/devices/system/node)";
  const auto node = smb::host::this_thread_node();
  ASSERT_TRUE(node.has_value()) << "getcpu gave no node";
  EXPECT_GE(*node, 0);
  EXPECT_EQ(smb::host::node_distance(*node, *node), 10) << "a node's distance to itself is 10 (ACPI SLIT)";
  EXPECT_EQ(smb::host::rdma_device_node("no-such-device"), std::nullopt);
}

}  // namespace
