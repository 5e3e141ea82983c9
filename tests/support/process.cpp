#include "process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>

namespace smb::test {
namespace {

using Clock = std::chrono::steady_clock;

ExitStatus from_wait_status(int status) {
  ExitStatus s;
  if (WIFEXITED(status)) {
    s.exited = true;
    s.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    s.signal = WTERMSIG(status);
  }
  return s;
}

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(left.count());
}

}  // namespace

std::string ExitStatus::describe() const {
  if (exited) return "exit " + std::to_string(code);
  return "killed by signal " + std::to_string(signal) + " (" + ::strsignal(signal) + ")";
}

pid_t spawn(const std::string& path, const std::vector<std::string>& args, int stdout_fd, int stderr_fd,
            std::optional<std::uint64_t> open_files) {
  // Everything the child needs is prepared before fork: between fork and
  // exec only async-signal-safe calls are allowed (the test is multithreaded).
  std::vector<std::string> storage;
  storage.push_back(path);
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) throw_errno("open /dev/null");
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(devnull);
    throw_errno("fork");
  }
  if (pid == 0) {
    // Die with the test process, even if it crashes.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(devnull, STDIN_FILENO);
    ::dup2(stdout_fd >= 0 ? stdout_fd : devnull, STDOUT_FILENO);
    ::dup2(stderr_fd >= 0 ? stderr_fd : devnull, STDERR_FILENO);
    // No test sockets or pipes leak into the child (they would keep
    // connections open or hide EOF from a reader).
    ::close_range(3, ~0U, 0);
    if (open_files) {
      const rlimit limit{*open_files, *open_files};
      ::setrlimit(RLIMIT_NOFILE, &limit);
    }
    ::execv(path.c_str(), argv.data());
    const char msg[] = "spawn: exec failed\n";
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::close(devnull);
  return pid;
}

std::optional<ExitStatus> wait_for_exit(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return from_wait_status(status);
    if (r < 0 && errno != EINTR) throw_errno("waitpid");
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

ProcessUsage process_usage(pid_t pid) {
  ProcessUsage usage;
  const std::string dir = "/proc/" + std::to_string(pid);
  std::ifstream status(dir + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) usage.rss_bytes = std::stoull(line.substr(6)) * 1024;  // "VmRSS:  123 kB"
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir + "/fd", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec))
    ++usage.open_fds;
  // /proc/PID/stat: fields 14 and 15 are utime and stime, after "(comm)".
  std::ifstream stat_file(dir + "/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; fields >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) {
      stime = std::stoull(field);
      break;
    }
  }
  usage.cpu_seconds = static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  return usage;
}

std::string ToolResult::describe() const {
  return (timed_out ? "timed out, " : "") + status.describe() + "\n--- stdout ---\n" + out +
         "--- stderr ---\n" + err;
}

ToolResult run_tool(const std::string& path, const std::vector<std::string>& args,
                    std::chrono::milliseconds timeout) {
  int out_pipe[2];
  int err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) throw_errno("pipe2");
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    throw_errno("pipe2");
  }
  pid_t pid = -1;
  try {
    pid = spawn(path, args, out_pipe[1], err_pipe[1]);
  } catch (...) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    throw;
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);

  // Drain both pipes together so that neither can fill up and stall the tool.
  ToolResult result;
  const auto deadline = Clock::now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_streams = 2;
  while (open_streams > 0 && !result.timed_out) {
    const int n = ::poll(fds, 2, remaining_ms(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) result.timed_out = true;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char chunk[4096];
      const ssize_t got = ::read(fds[i].fd, chunk, sizeof chunk);
      if (got > 0) {
        sinks[i]->append(chunk, static_cast<std::size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_streams;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);

  auto status = result.timed_out ? std::nullopt : wait_for_exit(pid, std::chrono::milliseconds(remaining_ms(deadline)));
  if (!status) {
    result.timed_out = true;
    ::kill(pid, SIGKILL);
    status = wait_for_exit(pid, std::chrono::seconds(10));
  }
  if (status) result.status = *status;
  return result;
}

}  // namespace smb::test
