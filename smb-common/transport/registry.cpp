#include "transport/registry.hpp"

#include <vector>

namespace smb::transport {

// One declaration and one list entry per transport registered at configure
// time (smb_register_transport in the transport's CMakeLists.txt).
#define SMB_TRANSPORT(name) const TransportEntry& name##_transport();
#include "transport/built_transports.inc"
#undef SMB_TRANSPORT

std::span<const TransportEntry* const> transports() {
  static const std::vector<const TransportEntry*> all{
#define SMB_TRANSPORT(name) &name##_transport(),
#include "transport/built_transports.inc"
#undef SMB_TRANSPORT
  };
  return all;
}

std::vector<std::string> transport_names() {
  std::vector<std::string> names;
  for (const auto* t : transports()) names.emplace_back(t->name);
  return names;
}

const TransportEntry& find_transport(std::string_view name) {
  std::string built;
  for (const auto* t : transports()) {
    if (t->name == name) return *t;
    built += (built.empty() ? "'" : ", '") + std::string(t->name) + "'";
  }
  throw Error(Errc::invalid_argument, "unknown transport '" + std::string(name) + "': this build has " + built +
                                          " (others are built where their libraries are found at configure time, "
                                          "e.g. rdma-core's libibverbs-dev and librdmacm-dev for 'verbs')");
}

void check_options(const TransportEntry& entry, const TransportOptions& options) {
  for (const auto& [key, value] : options) {
    bool known = false;
    std::string keys;
    for (const auto& o : entry.options) {
      known = known || o.key == key;
      keys += (keys.empty() ? "'" : ", '") + std::string(o.key) + "'";
    }
    if (!known)
      throw Error(Errc::invalid_argument, "transport '" + std::string(entry.name) + "' has no option '" + key + "' (" +
                                              (keys.empty() ? std::string("it takes none") : "it takes " + keys) + ")");
  }
}

std::unique_ptr<ServerTransport> make_server_transport(std::string_view name, const TransportOptions& options) {
  const auto& entry = find_transport(name);
  check_options(entry, options);
  return entry.make_server(options);
}

std::unique_ptr<ClientTransport> make_client_transport(std::string_view name, const TransportOptions& options) {
  const auto& entry = find_transport(name);
  check_options(entry, options);
  return entry.make_client(options);
}

}  // namespace smb::transport
