#include "smbd_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string_view>

namespace smb::test {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::string_view kReadyPrefix = "smbd ready on ";

// stderr goes to a file, not a pipe: nobody has to drain it, and it is still
// there to show when the daemon misbehaves. Unlinked at once, it vanishes
// with the last descriptor even if the test process crashes.
int make_log_file() {
  std::string path = (std::filesystem::temp_directory_path() / "smbd-test-XXXXXX.log").string();
  const int fd = ::mkostemps(path.data(), 4, O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot create a log file for smbd: " + std::string(std::strerror(errno)));
  ::unlink(path.c_str());
  return fd;
}

}  // namespace

// The build's smbd, or $SMB_SMBD (as smbrun): a test binary carried to
// another machine (tools/gpu-check.sh) runs the smbd carried with it.
const std::string& smbd_path() {
  static const std::string path = [] {
    const char* env = std::getenv("SMB_SMBD");
    return std::string(env != nullptr && *env != '\0' ? env : SMB_TEST_SMBD_PATH);
  }();
  return path;
}

SmbdProcess::SmbdProcess(SmbdOptions options) {
  log_fd_ = make_log_file();
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(log_fd_);
    throw std::runtime_error("pipe2 failed: " + std::string(std::strerror(errno)));
  }
  std::vector<std::string> args = {"--listen", options.listen, "--capacity", options.capacity};
  args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());
  try {
    pid_ = spawn(smbd_path(), args, out[1], log_fd_, options.open_files);
  } catch (...) {
    for (int fd : {out[0], out[1], log_fd_}) ::close(fd);
    throw;
  }
  ::close(out[1]);
  stdout_fd_ = out[0];

  // Read stdout line by line until the ready line, EOF or the deadline.
  const auto deadline = Clock::now() + options.ready_timeout;
  std::string seen;
  std::string failure;
  for (;;) {
    const auto nl = seen.find('\n');
    if (nl != std::string::npos) {
      const std::string line = seen.substr(0, nl);
      seen.erase(0, nl + 1);
      if (line.rfind(kReadyPrefix, 0) == 0) {
        address_ = line.substr(kReadyPrefix.size());
        break;
      }
      continue;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{stdout_fd_, POLLIN, 0};
    const int n = left > 0 ? ::poll(&p, 1, static_cast<int>(left)) : 0;
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      failure = "did not print 'smbd ready on HOST:PORT' within " +
                std::to_string(options.ready_timeout.count()) + " ms";
      break;
    }
    char chunk[512];
    const ssize_t got = ::read(stdout_fd_, chunk, sizeof chunk);
    if (got <= 0) {
      failure = "closed its stdout before printing 'smbd ready on HOST:PORT'";
      break;
    }
    seen.append(chunk, static_cast<std::size_t>(got));
  }
  if (!failure.empty()) {
    kill();
    const std::string message = "smbd (" + smbd_path() + " --listen " + options.listen + " --capacity " +
                                options.capacity + ") " + failure + "; it ended with " +
                                (exit_ ? exit_->describe() : "unknown status") + "\n--- smbd stderr ---\n" + log();
    ::close(stdout_fd_);
    ::close(log_fd_);
    throw std::runtime_error(message);
  }
}

SmbdProcess::~SmbdProcess() {
  kill();
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
  if (log_fd_ >= 0) ::close(log_fd_);
}

bool SmbdProcess::running() {
  if (exit_) return false;
  exit_ = wait_for_exit(pid_, std::chrono::milliseconds(0));
  return !exit_;
}

void SmbdProcess::kill() {
  stop_requested_ = true;
  if (!running()) return;
  ::kill(pid_, SIGKILL);
  exit_ = wait_for_exit(pid_, std::chrono::seconds(30));
}

std::optional<ExitStatus> SmbdProcess::terminate(std::chrono::milliseconds timeout) {
  return signal_and_wait(SIGTERM, timeout);
}

std::optional<ExitStatus> SmbdProcess::signal_and_wait(int signal, std::chrono::milliseconds timeout) {
  stop_requested_ = true;
  if (!running()) return exit_;
  ::kill(pid_, signal);
  exit_ = wait_for_exit(pid_, timeout);
  return exit_;
}

std::string SmbdProcess::log() const {
  std::string text;
  char chunk[4096];
  for (off_t at = 0;;) {  // pread: the daemon's writes move the shared offset, not ours
    const ssize_t got = ::pread(log_fd_, chunk, sizeof chunk, at);
    if (got <= 0) break;
    text.append(chunk, static_cast<std::size_t>(got));
    at += got;
  }
  return text;
}

}  // namespace smb::test
