// check_this_host: the system's checks, then each transport's own
// (TransportEntry::check_host), so that a transport added later brings its
// checks with it.
#include "host/system_checks.hpp"
#include "transport/registry.hpp"

#include <algorithm>

namespace smb {

const char* host_level_name(HostFinding::Level level) noexcept {
  switch (level) {
    case HostFinding::Level::ok: return "ok";
    case HostFinding::Level::note: return "note";
    case HostFinding::Level::warn: return "warn";
    case HostFinding::Level::fail: return "fail";
  }
  return "?";
}

std::vector<HostFinding> check_this_host(const HostCheckOptions& options) {
  std::vector<HostFinding> out;
  for (const auto* entry : transport::transports()) {
    if (!options.transport.empty() && entry->name != options.transport) continue;
    if (entry->check_host == nullptr) continue;
    auto found = entry->check_host(options);
    out.insert(out.end(), std::make_move_iterator(found.begin()), std::make_move_iterator(found.end()));
  }
  if (!options.transport.empty()) transport::find_transport(options.transport);  // an unknown name: its error
  // The limit is shown even where nothing here pins memory.
  if (std::none_of(out.begin(), out.end(), [](const HostFinding& f) { return f.check == "memlock"; }))
    out.insert(out.begin(), host::memlock_shown());
  auto system = host::system_findings(options);
  out.insert(out.begin(), system.begin(), system.end());
  return out;
}

}  // namespace smb
