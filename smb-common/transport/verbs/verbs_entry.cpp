// The native verbs transport's entry in the transport list (registry.hpp).
#include "transport/registry.hpp"
#include "transport/verbs/verbs_client.hpp"
#include "transport/verbs/verbs_server.hpp"

namespace smb::transport {

namespace verbs {
std::vector<HostFinding> check_host(const HostCheckOptions& options);  // verbs_host_checks.cpp
}

const TransportEntry& verbs_transport() {
  static const TransportEntry entry{
      .name = "verbs",
      .summary = "native rdma-core verbs: InfiniBand, RoCE, soft-RoCE (rdma_rxe); SMB_RDMA_DEVICE picks the device",
      .options = {},
      .make_server = [](const TransportOptions&) -> std::unique_ptr<ServerTransport> {
        return std::make_unique<verbs::VerbsServerTransport>();
      },
      .make_client = [](const TransportOptions&) -> std::unique_ptr<ClientTransport> {
        return std::make_unique<verbs::VerbsClientTransport>();
      },
      .check_host = verbs::check_host,
  };
  return entry;
}

}  // namespace smb::transport
