#pragma once
// NUMA distances between memory and devices, from sysfs: which of several
// NICs that reach a peer sits nearest the memory an op moves (issue 37:
// "when several NICs exist, they are ranked by NUMA distance to the
// buffer's memory"). A host with one node, or a device sysfs does not place
// (soft-RoCE, virtual NICs: numa_node -1), ranks every device alike.
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace smb::host {

// The node sysfs gives the device behind RDMA device `name`
// (/sys/class/infiniband/NAME/device/numa_node); nullopt where it gives none.
std::optional<int> rdma_device_node(const std::string& name);

// The node of the CPU this thread runs on: memory it first touches (a
// channel's staging area) is placed there.
std::optional<int> this_thread_node();

// The SLIT distance from node `from` to node `to`
// (/sys/devices/system/node/nodeFROM/distance); nullopt where unknown.
std::optional<int> node_distance(int from, int to);

using Distance = std::function<std::optional<int>(int from, int to)>;

// Of devices on `device_nodes` (nullopt: not placed), the index of the one
// strictly nearest `memory_node`; nullopt where the nearest are tied, where
// a device or the memory is not placed, or where a distance is unknown:
// then the caller keeps its usual choice.
std::optional<std::size_t> nearest_device(const std::vector<std::optional<int>>& device_nodes,
                                          std::optional<int> memory_node, const Distance& distance);

}  // namespace smb::host
