#include "transport/transport.hpp"

#include "transport/ucx/ucx_client.hpp"
#include "transport/ucx/ucx_server.hpp"
#ifdef SMB_WITH_VERBS
#include "transport/verbs/verbs_client.hpp"
#include "transport/verbs/verbs_server.hpp"
#endif

namespace smb::transport {
namespace {
#ifdef SMB_WITH_VERBS
constexpr const char* kSupported = "'ucx', 'verbs'";
#else
constexpr const char* kSupported = "'ucx' (configure with -DSMB_WITH_VERBS=ON and rdma-core for 'verbs')";
#endif

[[noreturn]] void unknown(std::string_view name) {
  throw Error(Errc::invalid_argument,
              "unknown transport '" + std::string(name) + "': this build supports " + kSupported);
}
}  // namespace

std::unique_ptr<ServerTransport> make_server_transport(std::string_view name) {
  if (name == "ucx") return std::make_unique<ucx::UcxServerTransport>();
#ifdef SMB_WITH_VERBS
  if (name == "verbs") return std::make_unique<verbs::VerbsServerTransport>();
#endif
  unknown(name);
}

std::unique_ptr<ClientTransport> make_client_transport(std::string_view name) {
  if (name == "ucx") return std::make_unique<ucx::UcxClientTransport>();
#ifdef SMB_WITH_VERBS
  if (name == "verbs") return std::make_unique<verbs::VerbsClientTransport>();
#endif
  unknown(name);
}

}  // namespace smb::transport
