#include "party.hpp"

#include "process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

namespace smb::test {
namespace {

const std::string& party_path() {
  static const std::string path = SMB_TEST_PARTY_PATH;
  return path;
}

// Reads from `fd` until "ready\n" came, the writer closed it, or the
// deadline; what came after it is left in `seen`.
bool wait_for_ready(int fd, std::chrono::milliseconds timeout, std::string& seen) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (seen.find("ready\n") == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char chunk[64];
    const auto n = ::read(fd, chunk, sizeof chunk);
    if (n <= 0) return false;
    seen.append(chunk, static_cast<std::size_t>(n));
  }
  seen.erase(0, seen.find("ready\n") + 6);
  return true;
}

}  // namespace

Party::Party(const std::string& servers, const std::vector<std::string>& role, std::chrono::milliseconds timeout) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  std::vector<std::string> args{"--servers", servers};
  args.insert(args.end(), role.begin(), role.end());
  try {
    pid_ = spawn(party_path(), args, out[1], STDERR_FILENO);  // its errors show in the test's output
  } catch (...) {
    for (int fd : out) ::close(fd);
    throw;
  }
  ::close(out[1]);
  out_ = out[0];
  const bool ready = wait_for_ready(out_, timeout, after_ready_);
  if (!ready) {
    kill();
    throw std::runtime_error("smb_test_party did not say ready (its stderr is above)");
  }
}

Party::~Party() { kill(); }

void Party::kill() {
  if (out_ >= 0) ::close(out_);
  out_ = -1;
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::string Party::finish(std::chrono::milliseconds timeout) {
  if (pid_ <= 0 || out_ < 0) throw std::runtime_error("smb_test_party: finished or killed already");
  ::kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string out = std::move(after_ready_);
  for (;;) {  // until it closes its end (it exits)
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      kill();
      throw std::runtime_error("smb_test_party did not finish within " + std::to_string(timeout.count()) +
                               " ms of SIGTERM; it printed: " + out);
    }
    pollfd p{out_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char chunk[256];
    const auto n = ::read(out_, chunk, sizeof chunk);
    if (n <= 0) break;
    out.append(chunk, static_cast<std::size_t>(n));
  }
  const auto status = wait_for_exit(pid_, timeout);
  if (!status) {
    kill();
    throw std::runtime_error("smb_test_party closed its output but did not exit; it printed: " + out);
  }
  pid_ = -1;
  ::close(out_);
  out_ = -1;
  if (!status->success())
    throw std::runtime_error("smb_test_party ended with " + status->describe() + "; it printed: " + out);
  return out;
}

}  // namespace smb::test
