// Which local RDMA ports the verbs transport uses: SMB_RDMA_DEVICE, the
// device a single-port user gets, every port a server stripes over (its
// rails), and the transport address that lists them for clients.
#include "transport/verbs/verbs_handles.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace smb::transport::verbs {
namespace {
constexpr std::size_t kAddressBytes = 16;
constexpr std::size_t kMaxAdvertised = 16;
}  // namespace

std::vector<std::uint8_t> encode_address(const ServerAddress& address) {
  std::vector<std::uint8_t> out{'S', 'M', 'B', 'V'};
  const std::uint16_t port = address.port;  // host byte order, as ever
  out.resize(out.size() + sizeof port);
  std::memcpy(out.data() + 4, &port, sizeof port);
  if (address.rails.size() < 2) return out;  // one rail: the control host's is the only one
  out.push_back(static_cast<std::uint8_t>(std::min(address.rails.size(), kMaxAdvertised)));
  for (std::size_t i = 0; i < address.rails.size() && i < kMaxAdvertised; ++i) {
    const auto& rail = address.rails[i];
    std::uint8_t bytes[kAddressBytes] = {};
    if (rail.ss_family == AF_INET6) {
      out.push_back(6);
      std::memcpy(bytes, &reinterpret_cast<const sockaddr_in6&>(rail).sin6_addr, kAddressBytes);
    } else {
      out.push_back(4);
      std::memcpy(bytes, &reinterpret_cast<const sockaddr_in&>(rail).sin_addr, 4);
    }
    out.insert(out.end(), bytes, bytes + kAddressBytes);
  }
  return out;
}

ServerAddress decode_address(const std::vector<std::uint8_t>& bytes, const std::string& peer) {
  const auto bad = [&] {
    return Error(Errc::protocol, "server " + peer +
                                     ": its transport address is not a verbs one (start smbd with "
                                     "--transport verbs, or unset SMB_TRANSPORT=verbs)");
  };
  if (bytes.size() < 6 || std::memcmp(bytes.data(), "SMBV", 4) != 0) throw bad();
  ServerAddress out;
  std::memcpy(&out.port, bytes.data() + 4, sizeof out.port);
  if (bytes.size() == 6) return out;
  const std::size_t count = bytes[6];
  if (count > kMaxAdvertised || bytes.size() != 7 + count * (1 + kAddressBytes)) throw bad();
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint8_t* at = bytes.data() + 7 + i * (1 + kAddressBytes);
    sockaddr_storage rail{};
    if (at[0] == 6) {
      auto& in6 = reinterpret_cast<sockaddr_in6&>(rail);
      in6.sin6_family = AF_INET6;
      std::memcpy(&in6.sin6_addr, at + 1, kAddressBytes);
    } else if (at[0] == 4) {
      auto& in = reinterpret_cast<sockaddr_in&>(rail);
      in.sin_family = AF_INET;
      std::memcpy(&in.sin_addr, at + 1, 4);
    } else {
      throw bad();
    }
    out.rails.push_back(rail);
  }
  return out;
}

std::string address_text(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = "?";
  const void* raw = address->sa_family == AF_INET6
                        ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr)
                        : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(address)->sin_addr);
  ::inet_ntop(address->sa_family, raw, text, sizeof text);
  return text;
}

std::vector<std::string> wanted_devices() {
  std::vector<std::string> out;
  const char* text = std::getenv("SMB_RDMA_DEVICE");
  if (text == nullptr) return out;
  std::string_view rest(text);
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const auto name = rest.substr(0, comma);
    if (!name.empty()) out.emplace_back(name);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return out;
}

bool device_wanted(const std::string& name) {
  const auto wanted = wanted_devices();
  return wanted.empty() || std::find(wanted.begin(), wanted.end(), name) != wanted.end();
}

ibv_context* pick_device(const char* who) {
  int count = 0;
  std::unique_ptr<ibv_context*, DevicesDeleter> list(rdma_get_devices(&count));
  if (!list || count == 0)
    throw Error(Errc::transport,
                std::string(who) + ": no RDMA device: load a driver, or add soft-RoCE with "
                                   "'rdma link add rxe0 type rxe netdev IFACE' (docs/softroce.md)");
  const auto wanted = wanted_devices();
  for (const auto& name : wanted)
    if (std::none_of(list.get(), list.get() + count, [&](ibv_context* c) { return device_name(c) == name; }))
      throw Error(Errc::transport,
                  std::string(who) + ": no RDMA device named '" + name + "' (see 'ibv_devices'; SMB_RDMA_DEVICE)");
  for (int i = 0; i < count; ++i) {
    ibv_context* c = list.get()[i];
    if (!wanted.empty() && device_name(c) != wanted.front()) continue;
    check_port(c, 1, who);
    return c;
  }
  throw Error(Errc::transport, std::string(who) + ": no RDMA device");  // not reached: checked above
}

std::vector<LocalPort> local_ports(const char* who) {
  ifaddrs* raw = nullptr;
  if (::getifaddrs(&raw) != 0) return {};
  const std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> interfaces(raw, &::freeifaddrs);
  const EventChannelPtr events = make_event_channel(who);
  std::vector<LocalPort> out;
  for (const ifaddrs* f = interfaces.get(); f != nullptr; f = f->ifa_next) {
    if (f->ifa_addr == nullptr || (f->ifa_flags & IFF_LOOPBACK) != 0 || (f->ifa_flags & IFF_UP) == 0) continue;
    const int family = f->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    if (family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(f->ifa_addr)->sin6_addr))
      continue;  // a scope a client elsewhere cannot name
    sockaddr_storage address{};
    std::memcpy(&address, f->ifa_addr, family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    // rdma_cm binds an address to the port its interface belongs to (no device: no bind).
    const IdPtr probe = make_id(events.get(), nullptr, who);
    if (rdma_bind_addr(probe.get(), reinterpret_cast<sockaddr*>(&address)) != 0 || probe->verbs == nullptr) continue;
    LocalPort port{probe->verbs, probe->port_num, address};
    ibv_port_attr attr{};
    if (!device_wanted(device_name(port.context)) || ibv_query_port(port.context, port.port, &attr) != 0 ||
        attr.state != IBV_PORT_ACTIVE)
      continue;
    if (std::none_of(out.begin(), out.end(),
                     [&](const LocalPort& p) { return p.context == port.context && p.port == port.port; }))
      out.push_back(port);
  }
  std::sort(out.begin(), out.end(), [](const LocalPort& a, const LocalPort& b) {
    const auto x = device_name(a.context), y = device_name(b.context);
    return x != y ? x < y : a.port < b.port;
  });
  return out;
}

}  // namespace smb::transport::verbs
