#pragma once
// Child processes for the integration tests: start a binary with its output
// redirected, wait for it with a deadline, run a tool to completion.
//
// Every child gets PR_SET_PDEATHSIG(SIGKILL), so even a test process that
// crashes (no destructors run) leaves no daemon or tool behind.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace smb::test {

// How a child ended, as waitpid reported it.
struct ExitStatus {
  bool exited = false;  // normal exit (code valid), else killed by `signal`
  int code = -1;
  int signal = 0;
  bool success() const { return exited && code == 0; }
  std::string describe() const;  // "exit 0", "killed by signal 9 (Killed)"
};

// fork + exec `path args...` with stdin from /dev/null and stdout/stderr on
// the given descriptors (-1: /dev/null); `open_files`, if given, is the
// child's open-file limit (soft and hard). Throws std::system_error.
pid_t spawn(const std::string& path, const std::vector<std::string>& args, int stdout_fd, int stderr_fd,
            std::optional<std::uint64_t> open_files = std::nullopt);

// What the kernel says a live process uses (from /proc/PID).
struct ProcessUsage {
  std::uint64_t rss_bytes = 0;
  std::size_t open_fds = 0;
  double cpu_seconds = 0;  // user + system
};
ProcessUsage process_usage(pid_t pid);

// Whether RSS says anything about memory coming back: not under ASan, whose
// quarantine holds freed memory (SMB_TEST_SANITIZED, from CMake).
inline constexpr bool kRssIsMeaningful = !SMB_TEST_SANITIZED;

// Reaps `pid` if it ends before `timeout`; nullopt if it is still running.
std::optional<ExitStatus> wait_for_exit(pid_t pid, std::chrono::milliseconds timeout);

struct ToolResult {
  ExitStatus status;
  bool timed_out = false;  // killed by us at the deadline
  std::string out;
  std::string err;
  std::string describe() const;  // status plus both streams, for failure messages
};

// Runs a command to completion (SIGKILL at `timeout`), capturing its output.
ToolResult run_tool(const std::string& path, const std::vector<std::string>& args,
                    std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace smb::test
