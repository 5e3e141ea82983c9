#include "progress.hpp"

#include <util/parse.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace smb::bench {
namespace {
std::atomic<std::uint64_t> done_bytes{0};
constexpr auto kRedraw = std::chrono::milliseconds(100);
constexpr double kQuietSeconds = 0.5;
constexpr int kWidth = 30;
}  // namespace

void progress_add(std::uint64_t bytes) { done_bytes.fetch_add(bytes, std::memory_order_relaxed); }

bool ProgressBar::wanted(bool json) { return !json && ::isatty(STDERR_FILENO) == 1; }

ProgressBar::ProgressBar(std::string what, std::uint64_t total, bool enabled)
    : what_(std::move(what)), total_(std::max<std::uint64_t>(total, 1)), start_(done_bytes.load()) {
  if (!enabled) return;
  thread_ = std::jthread([this](std::stop_token stop) {
    const auto begin = std::chrono::steady_clock::now();
    bool shown = false;
    while (!stop.stop_requested()) {
      std::this_thread::sleep_for(kRedraw);
      draw(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count(), shown);
    }
    if (shown) std::fputs("\r\x1b[K", stderr);  // erase the bar: the report follows
  });
}

ProgressBar::~ProgressBar() {
  if (thread_.joinable()) {
    thread_.request_stop();
    thread_.join();
  }
}

void ProgressBar::draw(double seconds, bool& shown) const {
  if (seconds < kQuietSeconds) return;
  const std::uint64_t done = std::min(done_bytes.load(std::memory_order_relaxed) - start_, total_);
  const double fraction = static_cast<double>(done) / static_cast<double>(total_);
  const int filled = static_cast<int>(fraction * kWidth);
  const double rate = static_cast<double>(done) / seconds;
  const double left = rate > 0 ? static_cast<double>(total_ - done) / rate : 0;
  std::fprintf(stderr, "\r%s [%.*s%*s] %3d%%  %s of %s  %s/s  ETA %ds\x1b[K", what_.c_str(), filled,
               "##############################", kWidth - filled, "", static_cast<int>(fraction * 100),
               util::format_bytes(done).c_str(), util::format_bytes(total_).c_str(),
               util::format_bytes(static_cast<std::uint64_t>(rate)).c_str(), static_cast<int>(left + 0.5));
  std::fflush(stderr);
  shown = true;
}

}  // namespace smb::bench
