// smb_test_party: a client in a process of its own, for tests that kill a
// party in the middle of a coordination op (tests/support/party.hpp).
//
//   smb_test_party --servers S lock NAME      take the lock (60 s lease), say "ready", hold it
//   smb_test_party --servers S barrier NAME N say "ready", then wait at barrier NAME of N parties
//   smb_test_party --servers S count NAME SLOT  open buffer NAME, say "ready", then fetch_add 1 to the
//                                             u64 at SLOT and accumulate 1.0 into the f32 after it, in
//                                             a loop, until SIGTERM; then print what was acknowledged:
//                                             "fetch_add ACKED UNCERTAIN accumulate ACKED UNCERTAIN"
//                                             (uncertain: ops that failed, applied or not)
//
// It is exec'd, not forked from the test: rdma-core's device contexts do not
// survive fork(), so a child forked from a test process that used native
// verbs could not post a single request (EPERM).
#include <smb/client.hpp>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <span>
#include <thread>

namespace {

void say_ready() {
  std::fputs("ready\n", stdout);
  std::fflush(stdout);
}

// Set by a thread that waits for SIGTERM: the signal is blocked in every
// other thread, so that it never interrupts a system call of libsmb's.
std::atomic<bool> stop_counting{false};
void stop_on_sigterm() {
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, nullptr);  // before any other thread starts: they inherit it
  std::thread([term] {
    int got = 0;
    sigwait(&term, &got);
    stop_counting = true;
  }).detach();
}

// The count role: every op is acknowledged (it returned), or uncertain (it
// failed: it may have been applied on some copy, or not). A failed op is
// not retried, and the buffer is opened again (by a new client) after a
// failure, as a worker that recovers by reopening would.
int count(const smb::ClientOptions& options, const std::string& name, std::uint64_t slot) {
  stop_on_sigterm();
  struct Tally {
    std::uint64_t acked = 0, uncertain = 0;
  } fetch_add, accumulate;
  auto client = std::make_unique<smb::Client>(options);
  auto buffer = std::make_unique<smb::Buffer>(client->open(name));
  say_ready();
  const float one = 1.0f;
  const auto x = std::as_bytes(std::span(&one, 1));
  while (!stop_counting) {
    Tally* op = &fetch_add;
    try {
      if (!buffer) {
        client = std::make_unique<smb::Client>(options);
        buffer = std::make_unique<smb::Buffer>(client->open(name));
      }
      buffer->fetch_add(slot, 1);
      ++op->acked;
      op = &accumulate;
      buffer->apply(smb::VectorOp::accumulate, smb::DType::f32, slot + 8, 1, 1.0, x);
      ++op->acked;
    } catch (const smb::Error& e) {
      if (buffer) ++op->uncertain;  // else the open failed: no op was sent
      std::fprintf(stderr, "smb_test_party count %s@%llu: %s\n", name.c_str(), static_cast<unsigned long long>(slot),
                   e.what());
      buffer.reset();
      client.reset();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  std::printf("fetch_add %llu %llu accumulate %llu %llu\n", static_cast<unsigned long long>(fetch_add.acked),
              static_cast<unsigned long long>(fetch_add.uncertain), static_cast<unsigned long long>(accumulate.acked),
              static_cast<unsigned long long>(accumulate.uncertain));
  std::fflush(stdout);
  // Done: no teardown. After servers died under it, UCX now and then keeps
  // 48 bytes (ucs_malloc, 1 run in 10 under ASan) that LeakSanitizer would
  // turn into an abort of this helper at exit; the tests' own processes
  // keep their leak checks.
  std::_Exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  CLI::App app{"a client process for the integration tests", "smb_test_party"};
  std::string servers, name;
  std::uint32_t parties = 0;
  std::uint64_t slot = 0, timeout_ms = 15'000;
  app.add_option("--servers", servers, "memory servers, host:port,...")->required();
  app.add_option("--timeout-ms", timeout_ms, "the client's timeout")->check(CLI::PositiveNumber);
  auto* lock = app.add_subcommand("lock", "take the lock NAME and hold it until killed");
  lock->add_option("name", name)->required();
  auto* barrier = app.add_subcommand("barrier", "wait at barrier NAME of PARTIES");
  barrier->add_option("name", name)->required();
  barrier->add_option("parties", parties)->required()->check(CLI::PositiveNumber);
  auto* counter = app.add_subcommand("count", "fetch_add and accumulate into SLOT of buffer NAME until SIGTERM");
  counter->add_option("name", name)->required();
  counter->add_option("slot", slot, "byte offset of the u64 counter (the f32 follows it)")->required();
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  // libsmb's log to stderr (the test's output): stdout is the pipe the test
  // reads "ready" and a count's tally from, and nobody drains it meanwhile.
  spdlog::set_default_logger(spdlog::stderr_logger_mt("smb_test_party"));
  try {
    smb::ClientOptions options;
    for (std::size_t start = 0; start < servers.size();) {
      const auto end = std::min(servers.find(',', start), servers.size());
      options.servers.push_back(servers.substr(start, end - start));
      start = end + 1;
    }
    options.timeout = std::chrono::milliseconds(timeout_ms);
    if (counter->parsed()) {
      options.tolerate_unreachable = true;  // a worker reopening while a server is down
      return count(options, name, slot);
    }
    smb::Client client(options);
    if (lock->parsed()) {
      smb::LockOptions long_lease;
      long_lease.lease = 60s;
      auto held = client.lock(name, long_lease);
      say_ready();
      std::this_thread::sleep_for(120s);
    } else {
      say_ready();
      client.barrier(name, parties, 120s);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "smb_test_party: %s\n", e.what());
    return 1;
  }
  return 0;
}
