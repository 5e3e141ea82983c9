#include "transport/transport.hpp"

#include "transport/ucx/ucx_client.hpp"
#include "transport/ucx/ucx_server.hpp"

namespace smb::transport {

std::unique_ptr<ServerTransport> make_server_transport(std::string_view name) {
  if (name == "ucx") return std::make_unique<ucx::UcxServerTransport>();
  throw Error(Errc::invalid_argument,
              "unknown transport '" + std::string(name) + "': this build supports 'ucx'");
}

std::unique_ptr<ClientTransport> make_client_transport(std::string_view name) {
  if (name == "ucx") return std::make_unique<ucx::UcxClientTransport>();
  throw Error(Errc::invalid_argument,
              "unknown transport '" + std::string(name) + "': this build supports 'ucx'");
}

}  // namespace smb::transport
