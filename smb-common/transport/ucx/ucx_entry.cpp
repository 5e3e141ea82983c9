// The UCX transport's entry in the transport list (registry.hpp).
#include "transport/registry.hpp"
#include "transport/ucx/ucx_client.hpp"
#include "transport/ucx/ucx_server.hpp"

#include <array>
#include <cstdlib>

namespace smb::transport {

namespace ucx {

std::vector<HostFinding> check_host(const HostCheckOptions& options);  // ucx_host_checks.cpp

DataProtocol data_protocol(const TransportOptions& options) {
  std::string value = "auto";
  if (auto it = options.find("protocol"); it != options.end()) {
    value = it->second;
  } else if (const char* env = std::getenv("SMB_DATA_PROTOCOL"); env != nullptr && *env != '\0') {
    value = env;
  }
  if (value == "auto") return DataProtocol::automatic;
  if (value == "rma") return DataProtocol::rma;
  if (value == "am") return DataProtocol::am;
  throw Error(Errc::invalid_argument,
              "ucx data protocol '" + value + "' (option 'protocol' or SMB_DATA_PROTOCOL): expected auto, rma or am");
}

}  // namespace ucx

namespace {
constexpr std::array kUcxOptions{
    TransportOption{"protocol",
                    "auto (default; else SMB_DATA_PROTOCOL): one-sided RMA on native lanes, the server-assisted "
                    "'am' protocol where UCX would emulate RMA (TCP); rma or am force one"},
};
}  // namespace

const TransportEntry& ucx_transport() {
  static const TransportEntry entry{
      .name = "ucx",
      .summary = "UCX: shared memory, TCP, InfiniBand/RoCE (whatever UCX_TLS allows)",
      .options = kUcxOptions,
      .make_server = [](const TransportOptions&) -> std::unique_ptr<ServerTransport> {
        return std::make_unique<ucx::UcxServerTransport>();
      },
      .make_client = [](const TransportOptions& options) -> std::unique_ptr<ClientTransport> {
        return std::make_unique<ucx::UcxClientTransport>(ucx::data_protocol(options));
      },
      .check_host = ucx::check_host,
  };
  return entry;
}

}  // namespace smb::transport
