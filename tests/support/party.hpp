#pragma once
// A party to a coordination op in a process of its own (smb_test_party), for
// tests that kill it halfway: it holds a lock or waits at a barrier until
// the test kills it. Exec'd, not forked from the test process (see
// party_main.cpp). RAII: the destructor kills and reaps it.
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace smb::test {

class Party {
 public:
  // smb_test_party --servers `servers` `role...`; returns once the party
  // said "ready" (throws std::runtime_error, with its stderr, if it did not
  // within `timeout`).
  Party(const std::string& servers, const std::vector<std::string>& role,
        std::chrono::milliseconds timeout = std::chrono::seconds(30));
  ~Party();
  Party(const Party&) = delete;
  Party& operator=(const Party&) = delete;

  void kill();  // SIGKILL and reap
  // SIGTERM, then what it printed after "ready" until it exited (roles that
  // report at the end: count); throws std::runtime_error if it did not exit
  // cleanly within `timeout`.
  std::string finish(std::chrono::milliseconds timeout = std::chrono::seconds(30));

 private:
  pid_t pid_ = -1;
  int out_ = -1;  // its stdout, after "ready"
  std::string after_ready_;
};

}  // namespace smb::test
