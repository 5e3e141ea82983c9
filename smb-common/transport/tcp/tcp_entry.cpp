// The tcp transport's entry in the transport list (registry.hpp).
#include "transport/registry.hpp"
#include "transport/tcp/tcp_client.hpp"
#include "transport/tcp/tcp_server.hpp"
#include "util/parse.hpp"

#include <array>
#include <charconv>

namespace smb::transport {

namespace {
constexpr std::array kTcpOptions{
    TransportOption{"port", "smbd's data port (default: any free one; clients learn it from the control port)"},
};

std::uint16_t data_port(const TransportOptions& options) {
  auto it = options.find("port");
  if (it == options.end()) return 0;
  unsigned port = 0;
  const auto& text = it->second;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (ec != std::errc() || end != text.data() + text.size() || port > 65535)
    throw Error(Errc::invalid_argument, "tcp transport option port=" + util::quoted(text) + ": expected 0-65535");
  return static_cast<std::uint16_t>(port);
}
}  // namespace

const TransportEntry& tcp_transport() {
  static const TransportEntry entry{
      .name = "tcp",
      .summary = "kernel TCP sockets, no RDMA needed: payloads go straight between the socket and memory",
      .options = kTcpOptions,
      .make_server = [](const TransportOptions& options) -> std::unique_ptr<ServerTransport> {
        return std::make_unique<tcp::TcpServerTransport>(data_port(options));
      },
      .make_client = [](const TransportOptions&) -> std::unique_ptr<ClientTransport> {
        return std::make_unique<tcp::TcpClientTransport>();
      },
  };
  return entry;
}

}  // namespace smb::transport
