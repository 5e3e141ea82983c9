// The UCX transport's host checks (TransportEntry::check_host): which
// transports UCX finds here, and, where one of them is RDMA, the memory it
// pins. (Which one it chose for a given server is the client's
// describe_paths: smbctl doctor --servers shows it.)
#include "host/system_checks.hpp"
#include "transport/ucx/ucx_handles.hpp"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

namespace smb::transport::ucx {

namespace {

using Level = HostFinding::Level;

// {transport: [devices]} from ucp_context_print_info's "resource" lines
// ("#      resource 1  :  md 1  dev 1  flags -- tcp/eth0").
std::map<std::string, std::set<std::string>> resources(ucp_context_h context) {
  char* text = nullptr;
  std::size_t size = 0;
  FILE* stream = ::open_memstream(&text, &size);
  if (stream == nullptr) return {};
  ucp_context_print_info(context, stream);
  std::fclose(stream);
  std::istringstream lines(std::string(text, size));
  std::free(text);
  std::map<std::string, std::set<std::string>> out;
  std::string line;
  while (std::getline(lines, line)) {
    const auto mark = line.find("flags -- ");
    if (line.find("resource") == std::string::npos || mark == std::string::npos) continue;
    const auto resource = line.substr(mark + 9);
    const auto slash = resource.find('/');
    if (slash == std::string::npos) continue;
    auto device = resource.substr(slash + 1);
    while (!device.empty() && device.back() == ' ') device.pop_back();
    out[resource.substr(0, slash)].insert(device);
  }
  return out;
}

bool is_rdma(const std::string& tl) { return tl.rfind("rc_", 0) == 0 || tl.rfind("ud_", 0) == 0 || tl.rfind("dc_", 0) == 0; }

}  // namespace

std::vector<HostFinding> check_host(const HostCheckOptions& options) {
  std::vector<HostFinding> out;
  const char* tls = std::getenv("UCX_TLS");
  const std::string chosen_by = tls != nullptr ? std::string(" (UCX_TLS=") + tls + ")" : std::string();
  ContextPtr context;
  try {
    context = make_context("smbctl doctor");
  } catch (const Error& e) {
    return {{Level::fail, "ucx", std::string("UCX does not start") + chosen_by + ": " + e.what(),
             "ucx_info -d lists what UCX finds; unset UCX_TLS or name transports it lists"}};
  }
  std::string found;
  std::string rdma;
  for (const auto& [tl, devices] : resources(context.get())) {
    std::string names;
    for (const auto& d : devices) names += (names.empty() ? "" : ", ") + d;
    found += (found.empty() ? "" : "; ") + tl + " (" + names + ")";
    if (is_rdma(tl) && rdma.empty()) rdma = tl + " on " + *devices.begin();
  }
  out.push_back({Level::ok, "ucx transports", "UCX finds " + (found.empty() ? std::string("nothing") : found) + chosen_by,
                 ""});
  if (!rdma.empty()) {
    out.push_back(host::memlock_finding(options.pinned_bytes, "UCX over " + rdma));
    return out;
  }
  const auto devices = host::rdma_devices();
  if (!devices.empty()) {
    out.push_back({Level::warn, "ucx rdma",
                   "the kernel has RDMA device " + devices.front() + " but UCX finds no RDMA transport" + chosen_by +
                       ": data moves over TCP",
                   "ucx_info -d | grep -i verbs (UCX's InfiniBand module: Debian's libucx0 has it); "
                   "unset UCX_TLS or add rc_verbs to it; check that /dev/infiniband is readable"});
  } else {
    out.push_back({Level::note, "ucx rdma",
                   "no RDMA device here: UCX moves data over TCP and shared memory",
                   ""});
  }
  return out;
}

}  // namespace smb::transport::ucx
