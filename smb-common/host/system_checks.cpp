#include "host/system_checks.hpp"

#include "util/parse.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace smb::host {

namespace {

using Level = HostFinding::Level;

constexpr int kCapIpcLock = 14;  // linux/capability.h: pins past the memlock limit
constexpr std::uint64_t kSmallMemlock = 64u << 20;
constexpr std::uint64_t kFewFiles = 1024;

std::string limit_text(rlim_t value) {
  return value == RLIM_INFINITY ? "unlimited" : util::format_bytes(static_cast<std::uint64_t>(value));
}

bool can_lock_past_the_limit() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    const auto mask = std::stoull(line.substr(7), nullptr, 16);
    return (mask >> kCapIpcLock) & 1u;
  }
  return false;
}

// /proc/meminfo's figures (kB or a count), by key without the colon.
std::map<std::string, std::uint64_t> meminfo() {
  std::map<std::string, std::uint64_t> out;
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    std::uint64_t value = 0;
    if (fields >> key >> value && !key.empty()) out[key.substr(0, key.size() - 1)] = value;
  }
  return out;
}

// "[madvise]" of "always [madvise] never".
std::string chosen(const std::string& choices) {
  const auto open = choices.find('['), close = choices.find(']');
  return open == std::string::npos || close == std::string::npos ? choices : choices.substr(open + 1, close - open - 1);
}

constexpr const char* kMemlockFix =
    "ulimit -l unlimited in the shell that starts it; LimitMEMLOCK=infinity in its systemd unit; "
    "'* - memlock unlimited' in /etc/security/limits.conf; or run it with CAP_IPC_LOCK";

HostFinding open_files(const HostCheckOptions& options) {
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  const auto soft = static_cast<std::uint64_t>(files.rlim_cur);
  const auto hard = static_cast<std::uint64_t>(files.rlim_max);
  HostFinding f{Level::ok, "open files", "limit " + std::to_string(soft) + " (hard " + std::to_string(hard) + ")", ""};
  // A connection holds a control socket and a data channel or two.
  const std::uint64_t needed = options.connections > 0 ? options.connections * 4 + 64 : kFewFiles;
  if (soft >= needed) return f;
  f.level = options.connections > 0 ? Level::fail : Level::warn;
  f.detail += options.connections > 0 ? ": " + std::to_string(options.connections) + " connections need about " +
                                            std::to_string(needed)
                                      : ": each client of smbd holds up to 4 (control, data channels)";
  f.fix = hard >= needed ? "ulimit -n " + std::to_string(hard)
                         : "ulimit -n 65536 (past the hard limit of " + std::to_string(hard) +
                               ": as root), LimitNOFILE=65536 in its systemd unit, or 'nofile' in "
                               "/etc/security/limits.conf";
  return f;
}

HostFinding huge_pages(const HostCheckOptions& options) {
  auto info = meminfo();
  const auto page = info["Hugepagesize"] * 1024;
  const auto total = info["HugePages_Total"], free = info["HugePages_Free"];
  const auto thp = chosen(read_first_line("/sys/kernel/mm/transparent_hugepage/enabled"));
  HostFinding f{Level::ok, "huge pages",
                std::to_string(free) + " of " + std::to_string(total) + " free (" + util::format_bytes(page) +
                    " each); transparent huge pages: " + (thp.empty() ? "unknown" : thp),
                ""};
  if (options.pinned_bytes == 0 || page == 0) return f;
  const auto needed = (options.pinned_bytes + page - 1) / page;
  if (free >= needed) {
    f.detail += "; a pool of " + util::format_bytes(options.pinned_bytes) + " fits in them";
    return f;
  }
  // smbd falls back to normal pages (with THP where allowed): it works, with
  // more TLB misses on large transfers.
  f.level = thp == "never" ? Level::warn : Level::note;
  f.detail += "; a pool of " + util::format_bytes(options.pinned_bytes) + " needs " + std::to_string(needed) +
              ", so smbd uses normal pages" + (thp == "never" ? " without transparent huge pages" : "");
  f.fix = "sysctl -w vm.nr_hugepages=" + std::to_string(total + needed - free) + " before smbd starts";
  return f;
}

}  // namespace

HostFinding memlock_finding(std::uint64_t pinned_bytes, const std::string& who) {
  rlimit lock{};
  ::getrlimit(RLIMIT_MEMLOCK, &lock);
  HostFinding f{Level::ok, "memlock", "locked-memory limit " + limit_text(lock.rlim_cur), ""};
  if (can_lock_past_the_limit()) {
    f.detail += " (CAP_IPC_LOCK: it does not apply)";
    return f;
  }
  if (lock.rlim_cur == RLIM_INFINITY) return f;
  const auto limit = static_cast<std::uint64_t>(lock.rlim_cur);
  if (pinned_bytes == 0) {
    if (limit >= kSmallMemlock) return f;
    f.level = Level::warn;
    f.detail += ": " + who + " pins the memory it registers, and ibv_reg_mr fails with ENOMEM past it";
  } else if (pinned_bytes > limit) {
    f.level = Level::fail;
    f.detail += ", but " + who + " pins " + util::format_bytes(pinned_bytes) +
                ": ibv_reg_mr fails with ENOMEM (Cannot allocate memory)";
  } else {
    f.detail += ": the " + util::format_bytes(pinned_bytes) + " " + who + " pins fit";
    return f;
  }
  f.fix = kMemlockFix;
  if (lock.rlim_max != RLIM_INFINITY) f.fix += " (the hard limit is " + limit_text(lock.rlim_max) + ")";
  return f;
}

HostFinding memlock_shown() {
  rlimit lock{};
  ::getrlimit(RLIMIT_MEMLOCK, &lock);
  return {Level::ok, "memlock", "locked-memory limit " + limit_text(lock.rlim_cur) +
                                    (can_lock_past_the_limit() ? ", which CAP_IPC_LOCK lifts" : "") +
                                    "; no transport checked here pins memory", ""};
}

std::vector<HostFinding> system_findings(const HostCheckOptions& options) {
  return {open_files(options), huge_pages(options)};
}

std::string default_route_interface() {
  std::ifstream routes("/proc/net/route");
  std::string line;
  std::getline(routes, line);  // the header
  while (std::getline(routes, line)) {
    std::istringstream fields(line);
    std::string iface, destination;
    if (fields >> iface >> destination && destination == "00000000") return iface;
  }
  return "IFACE";
}

std::vector<std::string> rdma_devices() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/sys/class/infiniband", ec))
    out.push_back(entry.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace smb::host
