#pragma once
// The checks every transport shares (include/smb/host_checks.hpp): limits
// of the calling process and the host's huge pages. The transports' own
// checks (transport/NAME/NAME_host_checks.cpp) call memlock_finding for
// the memory they pin.
#include <smb/host_checks.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace smb::host {

// The locked-memory limit against `pinned_bytes` that `who` ("the verbs
// transport", "UCX over rc_verbs") registers; a fail where it cannot fit.
HostFinding memlock_finding(std::uint64_t pinned_bytes, const std::string& who);

// The limit alone, where no transport checked pins memory.
HostFinding memlock_shown();

// Open files (connections) and huge pages.
std::vector<HostFinding> system_findings(const HostCheckOptions& options);

// The interface the default route leaves by ("eth0"), for the fixes'
// commands; "IFACE" where there is none.
std::string default_route_interface();

// The RDMA devices the kernel has (/sys/class/infiniband: mlx5_0, rxe0).
std::vector<std::string> rdma_devices();

// The first line of a file under /sys or /proc, or "" where it cannot be read.
std::string read_first_line(const std::string& path);

}  // namespace smb::host
