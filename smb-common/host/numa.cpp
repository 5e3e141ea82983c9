#include "host/numa.hpp"

#include "host/system_checks.hpp"

#include <sched.h>

#include <cstdlib>
#include <limits>
#include <sstream>

namespace smb::host {

namespace {
std::optional<int> parse_node(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const long node = std::strtol(text.c_str(), &end, 10);
  if (*end != '\0' || node < 0 || node > 4096) return std::nullopt;  // -1: sysfs does not know
  return static_cast<int>(node);
}
}  // namespace

std::optional<int> rdma_device_node(const std::string& name) {
  return parse_node(read_first_line("/sys/class/infiniband/" + name + "/device/numa_node"));
}

std::optional<int> this_thread_node() {
  unsigned cpu = 0;
  unsigned node = 0;
  if (::getcpu(&cpu, &node) != 0) return std::nullopt;
  return static_cast<int>(node);
}

std::optional<int> node_distance(int from, int to) {
  std::istringstream row(read_first_line("/sys/devices/system/node/node" + std::to_string(from) + "/distance"));
  int d = 0;
  for (int i = 0; row >> d; ++i)
    if (i == to) return d;
  return std::nullopt;
}

std::optional<std::size_t> nearest_device(const std::vector<std::optional<int>>& device_nodes,
                                          std::optional<int> memory_node, const Distance& distance) {
  if (!memory_node || device_nodes.size() < 2) return std::nullopt;
  std::optional<std::size_t> best;
  int best_distance = std::numeric_limits<int>::max();
  bool tied = false;
  for (std::size_t i = 0; i < device_nodes.size(); ++i) {
    if (!device_nodes[i]) return std::nullopt;
    const auto d = distance(*memory_node, *device_nodes[i]);
    if (!d) return std::nullopt;
    if (*d < best_distance) {
      best = i;
      best_distance = *d;
      tied = false;
    } else if (*d == best_distance) {
      tied = true;
    }
  }
  return tied ? std::nullopt : best;
}

}  // namespace smb::host
