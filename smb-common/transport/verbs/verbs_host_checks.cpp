// The native verbs transport's host checks (TransportEntry::check_host):
// the device, each port's state, GIDs and MTU, rdma_rxe where soft-RoCE is
// meant, and the locked memory smbd's registration needs. The errors the
// transport throws at start-up (verbs_handles.cpp) say the same things one
// at a time; these say all of them at once, before anything fails.
#include "host/numa.hpp"
#include "host/system_checks.hpp"
#include "transport/verbs/verbs_handles.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

namespace smb::transport::verbs {

namespace {

using Level = HostFinding::Level;

constexpr std::size_t kMaxGids = 256;

// IBV_MTU_256 (1) .. IBV_MTU_4096 (5).
int mtu_bytes(ibv_mtu mtu) { return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128 << mtu : 0; }

std::string interface_name(std::uint32_t ifindex) {
  std::array<char, IF_NAMESIZE> name{};
  return ifindex != 0 && ::if_indextoname(ifindex, name.data()) != nullptr ? std::string(name.data()) : std::string();
}

// A RoCE GID made from an IPv4 address: ::ffff:a.b.c.d.
bool ipv4_mapped(const ibv_gid& gid) {
  static constexpr std::array<std::uint8_t, 12> kMapped{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::equal(kMapped.begin(), kMapped.end(), gid.raw);
}

// The address a RoCE GID was made from, as rdma_cm takes a source.
sockaddr_storage gid_sockaddr(const ibv_gid_entry& entry) {
  sockaddr_storage out{};
  if (ipv4_mapped(entry.gid)) {
    auto* in = reinterpret_cast<sockaddr_in*>(&out);
    in->sin_family = AF_INET;
    std::memcpy(&in->sin_addr, entry.gid.raw + 12, 4);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&out);
    in6->sin6_family = AF_INET6;
    std::memcpy(&in6->sin6_addr, entry.gid.raw, 16);
    in6->sin6_scope_id = entry.ndev_ifindex;  // a link-local GID names its interface
  }
  return out;
}

// "10.0.2.15" for an IPv4-mapped GID, else the IPv6 text.
std::string gid_address(const ibv_gid& gid) {
  std::array<char, INET6_ADDRSTRLEN> text{};
  if (ipv4_mapped(gid))
    ::inet_ntop(AF_INET, gid.raw + 12, text.data(), text.size());
  else
    ::inet_ntop(AF_INET6, gid.raw, text.data(), text.size());
  return text.data();
}

std::string netdev_mtu(const std::string& iface) {
  return iface.empty() ? std::string() : host::read_first_line("/sys/class/net/" + iface + "/mtu");
}

// The port's GIDs, as rdma_cm will choose among them: a RoCE v2 GID with
// an IPv4 address routes across subnets; RoCE v1 stays in one L2 domain.
HostFinding gid_finding(ibv_context* context, std::uint8_t port, const std::string& where,
                        const std::string& iface) {
  std::vector<ibv_gid_entry> entries(kMaxGids);
  const auto n = ibv_query_gid_table(context, entries.data(), entries.size(), 0);
  std::string v2, v1;
  for (ssize_t i = 0; i < n; ++i) {
    const auto& e = entries[static_cast<std::size_t>(i)];
    if (e.port_num != port || e.gid_type == IBV_GID_TYPE_IB) continue;
    auto& list = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? v2 : v1;
    const auto on = interface_name(e.ndev_ifindex);
    list += (list.empty() ? "" : ", ") + std::to_string(e.gid_index) + ": " + gid_address(e.gid) +
            (on.empty() ? "" : " on " + on);
  }
  const auto dev = iface.empty() ? host::default_route_interface() : iface;
  if (!v2.empty()) return {Level::ok, "gid " + where, "RoCE v2 GIDs " + v2, ""};
  if (!v1.empty())
    return {Level::warn, "gid " + where,
            "RoCE v1 GIDs only (" + v1 + "): v1 does not cross an IP router, and rdma_cm prefers v2",
            "give " + dev + " an IP address so that the kernel adds RoCE v2 GIDs (ip address add ADDR/LEN dev " + dev +
                ")"};
  return {Level::fail, "gid " + where, "no GID with an IP address: rdma_cm cannot reach this port",
          "ip address add ADDR/LEN dev " + dev + " (RoCE derives its GIDs from the interface's addresses)"};
}

}  // namespace

std::string route_choice(rdma_cm_id* id) {
  std::string out = device_name(id->verbs) + " port " + std::to_string(id->port_num);
  // RoCE and InfiniBand alike: the route's source GID, found in the port's
  // table. RoCE lists each address twice, as v1 and v2; rdma_cm connects
  // with its default_roce_mode, v2 unless an administrator changed it.
  const ibv_gid& chosen = id->route.addr.addr.ibaddr.sgid;
  std::vector<ibv_gid_entry> entries(kMaxGids);
  const auto n = ibv_query_gid_table(id->verbs, entries.data(), entries.size(), 0);
  const ibv_gid_entry* found = nullptr;
  for (ssize_t i = 0; i < n; ++i) {
    const auto& e = entries[static_cast<std::size_t>(i)];
    if (e.port_num != id->port_num || std::memcmp(e.gid.raw, chosen.raw, sizeof chosen.raw) != 0) continue;
    if (found == nullptr || e.gid_type == IBV_GID_TYPE_ROCE_V2) found = &e;
  }
  if (found == nullptr) return out;
  const char* type = found->gid_type == IBV_GID_TYPE_ROCE_V2   ? "RoCE v2"
                     : found->gid_type == IBV_GID_TYPE_ROCE_V1 ? "RoCE v1"
                                                               : "IB";
  return out + ", GID " + std::to_string(found->gid_index) + " (" + type + ", " + gid_address(found->gid) + ")";
}

std::optional<sockaddr_storage> chosen_source(const char* who) {
  const char* text = std::getenv("SMB_RDMA_GID_INDEX");
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  const unsigned long index = std::strtoul(text, &end, 10);
  if (*end != '\0' || index >= kMaxGids)
    throw Error(Errc::invalid_argument, std::string(who) + ": SMB_RDMA_GID_INDEX='" + text +
                                            "' is not a GID index (0 to " + std::to_string(kMaxGids - 1) + ")");
  int count = 0;
  std::unique_ptr<ibv_context*, DevicesDeleter> list(rdma_get_devices(&count));
  const auto wanted = wanted_devices();  // the index is the first named device's
  ibv_context* context = nullptr;
  for (int i = 0; i < count && context == nullptr; ++i)
    if (wanted.empty() || device_name(list.get()[i]) == wanted.front()) context = list.get()[i];
  if (context == nullptr)
    throw Error(Errc::transport, std::string(who) + ": SMB_RDMA_GID_INDEX is set, but there is no RDMA device" +
                                     (!wanted.empty() ? " named " + wanted.front() : std::string()));
  const auto where = device_name(context) + " port 1";
  ibv_gid_entry entry{};
  if (ibv_query_gid_ex(context, 1, static_cast<std::uint32_t>(index), &entry, 0) != 0)
    throw Error(Errc::invalid_argument, std::string(who) + ": SMB_RDMA_GID_INDEX=" + text + ": " + where +
                                            " has no GID " + text + " ('smbctl doctor' lists its GIDs)");
  if (entry.gid_type == IBV_GID_TYPE_IB)
    throw Error(Errc::invalid_argument, std::string(who) + ": SMB_RDMA_GID_INDEX=" + text + ": GID " + text +
                                            " of " + where + " is InfiniBand's: the index chooses among RoCE GIDs");
  return gid_sockaddr(entry);  // rdma_cm routes from the address the GID was made from
}

namespace {

// A RoCE v2 GID of an active port, with the address it was made from.
struct RoceAddress {
  std::string device;
  std::string label;  // "rxe_b port 1, GID 1 (10.0.3.2)"
  sockaddr_storage address{};
  bool on_peer_subnet = false;
};

bool same_address_as(const sockaddr* a, const sockaddr* b) {
  if (a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET6)
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr, 16) == 0;
  return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
         reinterpret_cast<const sockaddr_in*>(b)->sin_addr.s_addr;
}

bool same_subnet(const sockaddr* a, const sockaddr* b, const sockaddr* mask) {
  if (a->sa_family != b->sa_family || mask == nullptr) return false;
  const auto bytes = [](const sockaddr* s) -> std::pair<const std::uint8_t*, std::size_t> {
    if (s->sa_family == AF_INET)
      return {reinterpret_cast<const std::uint8_t*>(&reinterpret_cast<const sockaddr_in*>(s)->sin_addr), 4};
    return {reinterpret_cast<const std::uint8_t*>(&reinterpret_cast<const sockaddr_in6*>(s)->sin6_addr), 16};
  };
  const auto [x, n] = bytes(a);
  const auto y = bytes(b).first;
  const auto m = bytes(mask).first;
  for (std::size_t i = 0; i < n; ++i)
    if ((x[i] & m[i]) != (y[i] & m[i])) return false;
  return true;
}

// Every active port's RoCE v2 GIDs of `peer`'s family, each marked when its
// interface's subnet holds `peer`.
std::vector<RoceAddress> roce_addresses(const sockaddr* peer) {
  ifaddrs* raw = nullptr;
  if (::getifaddrs(&raw) != 0) raw = nullptr;
  const std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> interfaces(raw, &::freeifaddrs);
  std::vector<RoceAddress> out;
  int count = 0;
  std::unique_ptr<ibv_context*, DevicesDeleter> list(rdma_get_devices(&count));
  for (int d = 0; d < count; ++d) {
    ibv_context* context = list.get()[d];
    std::vector<ibv_gid_entry> entries(kMaxGids);
    const auto n = ibv_query_gid_table(context, entries.data(), entries.size(), 0);
    for (ssize_t i = 0; i < n; ++i) {
      const auto& e = entries[static_cast<std::size_t>(i)];
      ibv_port_attr port{};
      if (e.gid_type != IBV_GID_TYPE_ROCE_V2 || (peer->sa_family == AF_INET) != ipv4_mapped(e.gid) ||
          ibv_query_port(context, static_cast<std::uint8_t>(e.port_num), &port) != 0 || port.state != IBV_PORT_ACTIVE)
        continue;
      RoceAddress a{device_name(context),
                    device_name(context) + " port " + std::to_string(e.port_num) + ", GID " +
                        std::to_string(e.gid_index) + " (" + gid_address(e.gid) + ")",
                    gid_sockaddr(e)};
      const auto iface = interface_name(e.ndev_ifindex);
      for (const ifaddrs* f = interfaces.get(); f != nullptr; f = f->ifa_next)
        if (f->ifa_addr != nullptr && iface == f->ifa_name && same_subnet(f->ifa_addr, reinterpret_cast<sockaddr*>(&a.address), f->ifa_netmask) &&
            same_subnet(reinterpret_cast<sockaddr*>(&a.address), peer, f->ifa_netmask))
          a.on_peer_subnet = true;
      out.push_back(std::move(a));
    }
  }
  return out;
}

}  // namespace

std::optional<sockaddr_storage> choose_source(const sockaddr* peer, std::string& why, const char* who) {
  why.clear();
  if (auto chosen = chosen_source(who)) {
    // rdma_cm answers a source of the other family with a bare EINVAL.
    if (chosen->ss_family != peer->sa_family) {
      const auto family = [](int f) { return f == AF_INET6 ? "IPv6" : "IPv4"; };
      const auto* s = reinterpret_cast<const sockaddr*>(&*chosen);
      throw Error(Errc::invalid_argument,
                  std::string(who) + ": SMB_RDMA_GID_INDEX=" + std::getenv("SMB_RDMA_GID_INDEX") + " is the " +
                      family(s->sa_family) + " address " + address_text(s) + ", and the server is " + family(peer->sa_family) +
                      ": rdma_cm cannot route between them; pick a GID of the server's family ('smbctl doctor' lists "
                      "each port's GIDs with their addresses) or unset SMB_RDMA_GID_INDEX");
    }
    why = "SMB_RDMA_GID_INDEX";
    return chosen;
  }
  const auto addresses = roce_addresses(peer);
  if (!wanted_devices().empty()) {
    // A named device's address on the peer's subnet, else the first of the peer's family.
    const RoceAddress* pick = nullptr;
    for (const auto& a : addresses)
      if (device_wanted(a.device) && (pick == nullptr || (a.on_peer_subnet && !pick->on_peer_subnet))) pick = &a;
    if (pick == nullptr) {
      spdlog::debug("{}: SMB_RDMA_DEVICE={} has no active RoCE v2 address of the server's family (InfiniBand, or "
                    "a port down): rdma_cm's route decides",
                    who, std::getenv("SMB_RDMA_DEVICE"));
      return std::nullopt;
    }
    why = "SMB_RDMA_DEVICE";
    spdlog::debug("{}: SMB_RDMA_DEVICE: {}", who, pick->label);
    return pick->address;
  }
  // Several devices on the peer's subnet: the one nearest this thread's
  // memory (a channel's staging area is placed on this thread's node).
  std::vector<const RoceAddress*> reach;
  for (const auto& a : addresses)
    if (a.on_peer_subnet && std::none_of(reach.begin(), reach.end(), [&](const RoceAddress* r) { return r->device == a.device; }))
      reach.push_back(&a);
  if (reach.size() < 2) return std::nullopt;  // rdma_cm's route picks the same one
  std::vector<std::optional<int>> nodes;
  for (const auto* a : reach) nodes.push_back(host::rdma_device_node(a->device));
  const auto memory = host::this_thread_node();
  const auto nearest = host::nearest_device(nodes, memory, host::node_distance);
  if (!nearest) {
    spdlog::debug("{}: {} devices reach the server at the same NUMA distance (or sysfs does not place them): "
                  "rdma_cm's route decides",
                  who, reach.size());
    return std::nullopt;
  }
  why = "NUMA: of " + std::to_string(reach.size()) + " devices on the server's subnet, the nearest to node " +
        std::to_string(*memory);
  spdlog::debug("{}: {}: {}", who, why, reach[*nearest]->label);
  return reach[*nearest]->address;
}

std::optional<sockaddr_storage> rail_source(const sockaddr* rail, const std::vector<sockaddr_storage>& used) {
  ifaddrs* raw = nullptr;
  if (::getifaddrs(&raw) != 0) return std::nullopt;
  const std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> interfaces(raw, &::freeifaddrs);
  std::optional<sockaddr_storage> pick;
  for (const ifaddrs* f = interfaces.get(); f != nullptr; f = f->ifa_next) {
    if (f->ifa_addr == nullptr || (f->ifa_flags & IFF_LOOPBACK) != 0 || (f->ifa_flags & IFF_UP) == 0 ||
        !same_subnet(f->ifa_addr, rail, f->ifa_netmask) || same_address_as(f->ifa_addr, rail))
      continue;  // (the rail's own address: a client on the server's host goes over a port of its own)
    const bool taken = std::any_of(used.begin(), used.end(), [&](const sockaddr_storage& u) {
      return same_address_as(reinterpret_cast<const sockaddr*>(&u), f->ifa_addr);
    });
    if (pick && taken) continue;  // an untaken one is better; a taken one still serves
    sockaddr_storage address{};
    std::memcpy(&address, f->ifa_addr, f->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    pick = address;
    if (!taken) break;
  }
  return pick;
}

std::vector<HostFinding> check_host(const HostCheckOptions& options) {
  // A missing device is what blocks where verbs is the transport asked for;
  // where every transport is checked, UCX over TCP may still carry the data.
  const bool wanted = options.transport == "verbs";
  const bool rxe_loaded = std::filesystem::exists("/sys/module/rdma_rxe");
  const auto iface = host::default_route_interface();
  std::vector<HostFinding> out;
  int count = 0;
  std::unique_ptr<ibv_context*, DevicesDeleter> list(rdma_get_devices(&count));
  if (!list || count == 0) {
    out.push_back({wanted ? Level::fail : Level::note, "rdma device",
                   std::string("no RDMA device") +
                       (rxe_loaded ? " (rdma_rxe is loaded, but no soft-RoCE link was added)" : ""),
                   std::string(rxe_loaded ? "" : "modprobe rdma_rxe && ") + "rdma link add rxe0 type rxe netdev " +
                       iface + " (soft-RoCE over Ethernet), or load your NIC's driver (mlx5_ib)"});
    out.push_back(host::memlock_finding(options.pinned_bytes, "the verbs transport"));
    return out;
  }
  const bool named = !wanted_devices().empty();
  bool any_active = false;
  for (int i = 0; i < count; ++i) {
    ibv_context* context = list.get()[i];
    const auto name = device_name(context);
    ibv_device_attr device{};
    if (ibv_query_device(context, &device) != 0) {
      out.push_back({Level::warn, "rdma device " + name, "cannot be queried", "rdma dev show; dmesg | grep -i " + name});
      continue;
    }
    const bool soft = name.rfind("rxe", 0) == 0;
    const auto node = host::rdma_device_node(name);
    out.push_back({Level::ok, "rdma device " + name,
                   std::to_string(device.phys_port_cnt) + " port(s)" + (soft ? ", soft-RoCE (rdma_rxe)" : "") +
                       (node ? ", NUMA node " + std::to_string(*node) : "") +
                       (named && device_wanted(name) ? ", chosen by SMB_RDMA_DEVICE" : ""),
                   ""});
    for (std::uint8_t port = 1; port <= device.phys_port_cnt; ++port) {
      const auto where = name + "/" + std::to_string(port);
      ibv_port_attr attr{};
      if (ibv_query_port(context, port, &attr) != 0) continue;
      const bool ethernet = attr.link_layer == IBV_LINK_LAYER_ETHERNET;
      std::string netdev;
      if (ethernet) {
        ibv_gid_entry entry{};
        if (ibv_query_gid_ex(context, port, 0, &entry, 0) == 0) netdev = interface_name(entry.ndev_ifindex);
      }
      const auto mtu = netdev_mtu(netdev);
      HostFinding f{Level::ok, "rdma port " + where,
                    std::string(ibv_port_state_str(attr.state)) + ", " + (ethernet ? "RoCE" : "InfiniBand") +
                        ", active MTU " + std::to_string(mtu_bytes(attr.active_mtu)) +
                        (netdev.empty() ? "" : " (" + netdev + " MTU " + mtu + ")"),
                    ""};
      if (attr.state != IBV_PORT_ACTIVE) {
        f.level = Level::warn;
        f.fix = ethernet ? "ip link set " + (netdev.empty() ? iface : netdev) + " up; check the cable and 'rdma link'"
                         : attr.state == IBV_PORT_INIT ? "start a subnet manager (systemctl start opensm)"
                                                       : "check the cable and 'ibstat " + name + "'";
      } else {
        any_active = true;
        // RoCE's MTU follows the interface's: below 1024 + headers it drops to 512 or 256.
        if (ethernet && mtu_bytes(attr.active_mtu) < 1024) {
          f.level = Level::warn;
          f.fix = "ip link set " + netdev + " mtu 1500 (RoCE takes the largest of 256..4096 that fits)";
        }
      }
      out.push_back(std::move(f));
      if (ethernet && attr.state == IBV_PORT_ACTIVE) out.push_back(gid_finding(context, port, where, netdev));
    }
  }
  if (!any_active)
    out.push_back({wanted ? Level::fail : Level::warn, "rdma port", "no RDMA port is active",
                   "ip link set " + iface + " up (RoCE), or start a subnet manager (InfiniBand)"});
  // smbd registers its pool once per port it stripes over, and each registration pins it again.
  std::size_t ports = 1;
  if (options.pinned_bytes != 0) {
    try {
      ports = std::max<std::size_t>(1, local_ports("smb doctor").size());
    } catch (const Error&) {
      // No rdma_cm: the findings above say why; count one port.
    }
  }
  out.push_back(host::memlock_finding(options.pinned_bytes * ports,
                                      ports > 1 ? "the verbs transport, once per port (" + std::to_string(ports) +
                                                      " ports),"
                                                : std::string("the verbs transport")));
  return out;
}

}  // namespace smb::transport::verbs
