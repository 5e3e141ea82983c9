#pragma once
// Every transport this build has, in one list: smbd's --transport, the
// client's SMB_TRANSPORT, the tools' help and the tests all come from it.
//
// A transport lives in its own directory (transport/NAME/) with its own
// CMakeLists.txt, which finds the transport's dependencies, adds its sources
// to smb_common and calls smb_register_transport(NAME); the directory is
// added by one line in smb-common/CMakeLists.txt. Its code defines
//   const smb::transport::TransportEntry& NAME_transport();
// and the build generates the list from the names registered (see
// registry.cpp and transport/built_transports.inc).
#include "transport/transport.hpp"

#include <smb/host_checks.hpp>

#include <span>
#include <string>
#include <string_view>

namespace smb::transport {

struct TransportOption {
  std::string_view key;
  std::string_view help;  // values and what they do
};

struct TransportEntry {
  std::string_view name;                     // "ucx", "verbs"
  std::string_view summary;                  // one line for --help
  std::span<const TransportOption> options;  // what TransportOptions it accepts
  std::unique_ptr<ServerTransport> (*make_server)(const TransportOptions& options);
  std::unique_ptr<ClientTransport> (*make_client)(const TransportOptions& options);
  // What this host needs for the transport (smbctl doctor, smbd at start-up):
  // its devices, ports and the memory it pins; nullptr where it needs
  // nothing beyond the system's checks (host/system_checks.hpp).
  std::vector<HostFinding> (*check_host)(const HostCheckOptions& options) = nullptr;
};

// The transports built into this library, in registration order.
std::span<const TransportEntry* const> transports();
std::vector<std::string> transport_names();
// Throws Errc::invalid_argument naming the transports built when `name` is not one.
const TransportEntry& find_transport(std::string_view name);
// Throws Errc::invalid_argument for an option key the entry does not list.
void check_options(const TransportEntry& entry, const TransportOptions& options);

std::unique_ptr<ServerTransport> make_server_transport(std::string_view name, const TransportOptions& options = {});
std::unique_ptr<ClientTransport> make_client_transport(std::string_view name, const TransportOptions& options = {});

}  // namespace smb::transport
