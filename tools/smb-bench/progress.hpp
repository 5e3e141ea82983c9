#pragma once
// smb-bench's progress bar for long write, read and vector-op runs: on
// stderr, only when stderr is a terminal and --json is not given, and only
// once a run has taken half a second (short runs print nothing). Redrawn
// ten times a second from its own thread; the ops count their bytes from
// any thread with progress_add(), which costs one relaxed atomic add.
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

namespace smb::bench {

void progress_add(std::uint64_t bytes);

class ProgressBar {
 public:
  // `total`: the bytes the phase will move. Shows nothing unless `enabled`.
  ProgressBar(std::string what, std::uint64_t total, bool enabled);
  ~ProgressBar();  // stops and erases the bar
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Whether a bar belongs on this run's stderr.
  static bool wanted(bool json);

 private:
  void draw(double seconds, bool& shown) const;
  std::string what_;
  std::uint64_t total_;
  std::uint64_t start_;
  std::jthread thread_;
};

}  // namespace smb::bench
