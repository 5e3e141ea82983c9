#pragma once
// The gate a replicated buffer's changing ops (writes, vector ops, atomics)
// pass, so that a repair's final copy sees no change land under it: a pause
// stops new ops at the gate and waits until those running have returned and
// the transfers they left in flight (a write's pieces) have completed
// (repair_watch.cpp; docs/reliability.md, "Repair"). Reads never wait here.
#include "transport/completion.hpp"
#include "transport/transport.hpp"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace smb::client {

struct ServerLink;

class OpGate {
 public:
  // An op that changes the buffer, from its start to its return.
  class Pass {
   public:
    explicit Pass(OpGate& gate) : gate_(gate) { gate_.enter(); }
    ~Pass() { gate_.leave(); }
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;

   private:
    OpGate& gate_;
  };

  // A transfer an op leaves in flight when it returns (on `link`): a pause
  // waits for it, or for its server to be gone.
  void track(const transport::CompletionPtr& completion, ServerLink* link) {
    std::lock_guard lock(mutex_);
    if (in_flight_.size() >= kPruneAt)
      std::erase_if(in_flight_, [](const InFlight& f) {
        const auto live = f.completion.lock();
        return !live || live->done();
      });
    in_flight_.push_back({completion, link});
  }

  // Stops new ops and waits for the running ones and their transfers; false
  // (and still paused: call resume) when they did not finish by `deadline`.
  // `gone(link)` tells a transfer on a server that is gone (it never completes).
  template <class Progress, class Gone>
  bool pause(std::chrono::steady_clock::time_point deadline, Progress progress, Gone gone) {
    std::unique_lock lock(mutex_);
    paused_ = true;
    if (!changed_.wait_until(lock, deadline, [&] { return running_ == 0; })) return false;
    for (;;) {
      std::erase_if(in_flight_, [&](const InFlight& f) {
        auto completion = f.completion.lock();
        return !completion || completion->done() || gone(f.link);
      });
      if (in_flight_.empty()) return true;
      if (std::chrono::steady_clock::now() > deadline) return false;
      lock.unlock();
      progress();
      std::this_thread::yield();
      lock.lock();
    }
  }

  // For an op that does not pass the gate (a read) and found no copy it can
  // use: while a pause holds the gate, the repair's end may be bringing this
  // buffer rebuilt copies (adopt, then resume). True when the gate was closed
  // and opened again by `deadline`: the op should look again.
  bool wait_for_reopening(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    if (!paused_) return false;
    return changed_.wait_until(lock, deadline, [&] { return !paused_; });
  }
  void resume() {
    {
      std::lock_guard lock(mutex_);
      paused_ = false;
    }
    changed_.notify_all();
  }

 private:
  static constexpr std::size_t kPruneAt = 256;
  struct InFlight {
    std::weak_ptr<transport::Completion> completion;
    ServerLink* link;
  };

  void enter() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !paused_; });
    ++running_;
  }
  void leave() {
    {
      std::lock_guard lock(mutex_);
      --running_;
    }
    changed_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  bool paused_ = false;
  std::size_t running_ = 0;
  std::vector<InFlight> in_flight_;
};

}  // namespace smb::client
