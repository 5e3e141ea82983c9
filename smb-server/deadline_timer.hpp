#pragma once
// One io-thread timer for the earliest of many deadlines, for state that
// lives off the io thread under its own mutex (version waits, barriers): a
// stream of waits with equal timeouts posts nothing to the io thread after
// the first, since each later deadline comes after the one already armed.
//
// The owner calls arm(d) after adding a deadline d (any thread), and its
// `on_due` (io thread) ends what is late and arms the next deadline left.
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>

namespace smb::server {

class DeadlineTimer {
 public:
  using Clock = std::chrono::steady_clock;

  DeadlineTimer(boost::asio::io_context& io, std::function<void()> on_due)
      : io_(io), on_due_(std::move(on_due)), timer_(io) {}

  // Any thread: on_due runs no later than `deadline`.
  void arm(Clock::time_point deadline) {
    std::lock_guard lock(mutex_);
    if (armed_ && *armed_ <= deadline) return;
    armed_ = deadline;
    boost::asio::post(io_, [this] { start(); });
  }

 private:
  void start() {  // io thread
    std::lock_guard lock(mutex_);
    if (!armed_) return;
    timer_.expires_at(*armed_);  // cancels the wait for a later deadline
    timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) fire();
    });
  }
  void fire() {  // io thread
    {
      std::lock_guard lock(mutex_);
      armed_.reset();
    }
    on_due_();
  }

  boost::asio::io_context& io_;
  std::function<void()> on_due_;
  std::mutex mutex_;
  std::optional<Clock::time_point> armed_;  // the deadline the timer is (about to be) set for
  boost::asio::steady_timer timer_;         // touched on the io thread only
};

}  // namespace smb::server
