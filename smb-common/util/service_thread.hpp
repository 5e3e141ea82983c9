#pragma once
// The thread a server transport runs its loop on (UCX progress, rdma_cm
// events), with an eventfd the loop also sleeps on, so that stop() can wake
// it at once instead of waiting for the loop's next event.
#include "util/fd.hpp"

#include <smb/error.hpp>

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <stop_token>
#include <thread>

namespace smb::util {

class ServiceThread {
 public:
  ServiceThread() : wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (!wake_fd_) throw Error(Errc::internal, "smbd: eventfd failed");
  }
  ~ServiceThread() { stop(); }
  ServiceThread(const ServiceThread&) = delete;
  ServiceThread& operator=(const ServiceThread&) = delete;

  // The loop polls wake_fd() beside its own fds and returns once `stop` is requested.
  void start(std::function<void(const std::stop_token&)> loop) {
    thread_ = std::jthread([this, loop = std::move(loop)](std::stop_token stop) {
      loop_thread_ = std::this_thread::get_id();
      loop(stop);
    });
  }
  void stop() {
    if (!thread_.joinable()) return;
    thread_.request_stop();
    wake();
    thread_.join();
  }
  int wake_fd() const { return wake_fd_.get(); }
  // Makes wake_fd() readable, e.g. for work queued from another thread.
  // Work queued by the loop's own thread needs no wake-up (the loop looks
  // at its queues before it sleeps), and the write is a system call per
  // small call.
  void wake() {
    if (std::this_thread::get_id() == loop_thread_.load(std::memory_order_relaxed)) return;
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_.get(), &one, sizeof one);
  }
  // Called by the loop after waking, so that wake_fd() sleeps again.
  void clear_wake() {
    std::uint64_t count = 0;
    [[maybe_unused]] auto n = ::read(wake_fd_.get(), &count, sizeof count);
  }

 private:
  UniqueFd wake_fd_;
  std::atomic<std::thread::id> loop_thread_{};
  std::jthread thread_;
};

}  // namespace smb::util
