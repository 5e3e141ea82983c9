// smb_test_party: a client in a process of its own, for tests that kill a
// party in the middle of a coordination op (tests/support/party.hpp).
//
//   smb_test_party --servers S lock NAME      take the lock (60 s lease), say "ready", hold it
//   smb_test_party --servers S barrier NAME N say "ready", then wait at barrier NAME of N parties
//
// It is exec'd, not forked from the test: rdma-core's device contexts do not
// survive fork(), so a child forked from a test process that used native
// verbs could not post a single request (EPERM).
#include <smb/client.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>

namespace {

void say_ready() {
  std::fputs("ready\n", stdout);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  CLI::App app{"a client process for the integration tests", "smb_test_party"};
  std::string servers, name;
  std::uint32_t parties = 0;
  app.add_option("--servers", servers, "memory servers, host:port,...")->required();
  auto* lock = app.add_subcommand("lock", "take the lock NAME and hold it until killed");
  lock->add_option("name", name)->required();
  auto* barrier = app.add_subcommand("barrier", "wait at barrier NAME of PARTIES");
  barrier->add_option("name", name)->required();
  barrier->add_option("parties", parties)->required()->check(CLI::PositiveNumber);
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  try {
    smb::ClientOptions options;
    for (std::size_t start = 0; start < servers.size();) {
      const auto end = std::min(servers.find(',', start), servers.size());
      options.servers.push_back(servers.substr(start, end - start));
      start = end + 1;
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
