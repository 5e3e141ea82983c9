#pragma once
// Completion tracking shared by all transports: an operation that fans out
// into several transport-level ops (one per stripe piece) completes when the
// last of them finishes; the first error wins.
#include <smb/error.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

namespace smb::transport {

class Completion {
 public:
  void expect(int count = 1) { pending_.fetch_add(count, std::memory_order_relaxed); }

  void finish(Errc code = Errc::ok, const std::string& message = {}) {
    if (code != Errc::ok) {
      std::lock_guard lock(mutex_);
      if (error_ == Errc::ok) {
        error_ = code;
        message_ = message;
        failed_.store(true, std::memory_order_release);
      }
    }
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }

  bool done() const { return pending_.load(std::memory_order_acquire) <= 0; }
  bool failed() const { return failed_.load(std::memory_order_acquire); }

  void throw_if_failed() const {
    if (!failed_.load(std::memory_order_acquire)) return;  // the common case, without the lock
    std::lock_guard lock(mutex_);
    if (error_ != Errc::ok) throw Error(error_, message_);
  }

 private:
  std::atomic<int> pending_{0};
  std::atomic<bool> failed_{false};
  mutable std::mutex mutex_;
  Errc error_ = Errc::ok;
  std::string message_;
};

using CompletionPtr = std::shared_ptr<Completion>;

}  // namespace smb::transport
