#pragma once
/// \file
/// What a host needs for the fabric, checked before it fails: the limits,
/// memory and RDMA set-up that cost users of RDMA fabrics days (a memlock
/// limit below the registration, a port down, no RoCE v2 GID, no rdma_rxe
/// where soft-RoCE is meant). `smbctl doctor` prints them for this host and
/// every server; smbd logs its own once at start-up. Each finding that is
/// not ok carries the command that fixes it.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace smb {

struct HostFinding {
  enum class Level {
    ok,    ///< as it should be
    note,  ///< worth knowing; nothing fails because of it
    warn,  ///< works, but slower or fragile (e.g. a limit near what is needed)
    fail,  ///< blocks: what it checks will not work until fixed
  };
  Level level = Level::ok;
  std::string check;   ///< what was checked: "memlock", "rdma port rxe0/1", "gid rxe0/1"
  std::string detail;  ///< what was found, with figures
  std::string fix;     ///< the command or setting that fixes it; empty when ok
};

const char* host_level_name(HostFinding::Level level) noexcept;  ///< "ok", "note", "warn", "fail"

struct HostCheckOptions {
  /// The transport to check for ("ucx", "verbs", "tcp"); empty: every
  /// transport this build has.
  std::string transport;
  /// Bytes the process will pin (smbd: its --capacity; a client: the memory
  /// it registers); 0: unknown, the limits are only shown.
  std::uint64_t pinned_bytes = 0;
  /// Connections the process will hold open (file descriptors); 0: unknown.
  std::uint64_t connections = 0;
};

/// The checks of this host (the calling process's limits): memlock, open
/// files, huge pages, then each transport's own (RDMA devices, ports, GIDs
/// and MTU for verbs; the transports UCX finds for ucx).
std::vector<HostFinding> check_this_host(const HostCheckOptions& options);

}  // namespace smb
