#pragma once
// One real smbd memory server for integration tests (RAII).
//
// Starts the daemon on an OS-chosen loopback port, waits for its
// "smbd ready on HOST:PORT" line and fails with the daemon's own stderr when
// that does not come. The destructor kills and reaps it, so no test leaves a
// daemon behind, whether it passes or fails (and PR_SET_PDEATHSIG covers a
// test process that crashes).
#include "process.hpp"

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace smb::test {

struct SmbdOptions {
  std::string listen = "127.0.0.1:0";
  std::string capacity = "64M";
  std::vector<std::string> extra_args;
  std::chrono::milliseconds ready_timeout{std::chrono::seconds(20)};
  std::optional<std::uint64_t> open_files;  // the daemon's open-file limit (soft and hard)
};

class SmbdProcess {
 public:
  explicit SmbdProcess(SmbdOptions options = {});  // throws std::runtime_error
  ~SmbdProcess();
  SmbdProcess(const SmbdProcess&) = delete;
  SmbdProcess& operator=(const SmbdProcess&) = delete;

  // "127.0.0.1:PORT", as the daemon announced it.
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }

  // True until the daemon has ended (reaps it if it just did).
  bool running();
  // How it ended, once it has.
  const std::optional<ExitStatus>& exit_status() const { return exit_; }
  // Ended without kill()/terminate() asking it to: a crash the test should report.
  bool died_unexpectedly() { return !running() && !stop_requested_; }

  // SIGKILL and reap: a crashed or unplugged server.
  void kill();
  // SIGTERM, then wait up to `timeout`; nullopt if it is still running
  // (the destructor then kills it).
  std::optional<ExitStatus> terminate(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // Sends `signal` and waits like terminate().
  std::optional<ExitStatus> signal_and_wait(int signal, std::chrono::milliseconds timeout);

  // What the daemon logged on stderr so far, for failure messages.
  std::string log() const;
  // Its memory, descriptors and CPU time now.
  ProcessUsage usage() const { return process_usage(pid_); }

 private:
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int log_fd_ = -1;  // the daemon's stderr: an unlinked file, so a crashed test leaves none behind
  std::string address_;
  std::optional<ExitStatus> exit_;
  bool stop_requested_ = false;
};

// Path of the smbd binary under test (from CMake).
const std::string& smbd_path();

}  // namespace smb::test
