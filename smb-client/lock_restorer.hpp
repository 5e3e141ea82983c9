#pragma once
// Holds restored after a keeper's loss (docs/reliability.md, "Locks and
// barriers with two keepers"). A lock on a name kept by two servers is held
// at both; where one is lost (its connection closed, or it could not be
// reached when the lock was taken), this thread takes the hold there again,
// marked `restore`, as soon as the server answers: a restarted server grants
// only restores during its grace (smbd --lock-grace), so that the hold is
// back before anyone else can take the range there.
//
// One thread per client, running only while it has such locks; it checks
// them every kPoll, which costs a non-blocking look at each hold's socket.
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <smb/client.hpp>

namespace smb::client {

class LockRestorer {
 public:
  static constexpr std::chrono::milliseconds kPoll{50};

  LockRestorer() = default;
  ~LockRestorer();
  LockRestorer(const LockRestorer&) = delete;
  LockRestorer& operator=(const LockRestorer&) = delete;

  // Watches `lock` until it is released (or dropped).
  void watch(const std::shared_ptr<Lock::State>& lock);

 private:
  // Outlives this object while the thread runs: a restore may drop the last
  // reference to the client, whose destructor then runs on the thread.
  struct Shared {
    std::mutex mutex;
    std::condition_variable wake;
    std::vector<std::weak_ptr<Lock::State>> locks;
    bool running = false, stop = false;
  };
  static void run(std::shared_ptr<Shared> shared);
  static void restore_where_lost(Lock::State& lock);

  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  std::thread thread_;
};

}  // namespace smb::client
