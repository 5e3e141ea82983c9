// A slow, distant link between two testbed sites, in user space: this
// machine's kernel has no netem (tc's delay), so testbed.sh joins two site
// bridges through two TAP devices and this program forwards every Ethernet
// frame between them after a one-way delay, at a limited rate, as a long
// line would: a frame leaves at max(arrival + delay, when the line is free
// after the frames before it), and a direction holding more than its queue
// limit drops the frame (tail drop, as a router's queue).
//
//   delay_link TAP_A TAP_B DELAY_US RATE_BITS_PER_S [QUEUE_BYTES]
//
// The TAP devices must exist (ip tuntap add NAME mode tap) in the network
// namespace this runs in. It runs until killed.
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <time.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using Micros = std::chrono::microseconds;

struct Frame {
  Clock::time_point due;
  std::vector<unsigned char> bytes;
};

// One direction of the line: frames read from `from`, written to `to`.
struct Direction {
  int from = -1, to = -1;
  std::deque<Frame> queue;
  std::size_t queued_bytes = 0;
  Clock::time_point line_free{};
  unsigned long long dropped = 0;
};

int open_tap(const char* name) {
  const int fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    std::perror("delay_link: /dev/net/tun");
    std::exit(1);
  }
  ifreq req{};
  req.ifr_flags = IFF_TAP | IFF_NO_PI;
  std::snprintf(req.ifr_name, IFNAMSIZ, "%s", name);
  if (::ioctl(fd, TUNSETIFF, &req) < 0) {
    std::fprintf(stderr, "delay_link: attaching to TAP device %s: %s\n", name, std::strerror(errno));
    std::exit(1);
  }
  return fd;
}

unsigned long long number(const char* text, const char* what) {
  char* end = nullptr;
  const auto value = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0') {
    std::fprintf(stderr, "delay_link: %s must be a whole number (got '%s')\n", what, text);
    std::exit(2);
  }
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr, "usage: delay_link TAP_A TAP_B DELAY_US RATE_BITS_PER_S [QUEUE_BYTES]\n");
    return 2;
  }
  const Micros delay(number(argv[3], "DELAY_US"));
  const double rate = static_cast<double>(number(argv[4], "RATE_BITS_PER_S"));
  if (rate <= 0) {
    std::fprintf(stderr, "delay_link: RATE_BITS_PER_S must be positive\n");
    return 2;
  }
  // Default: the line's bytes in flight over one delay, at least 1 MiB.
  const std::size_t limit =
      argc == 6 ? number(argv[5], "QUEUE_BYTES")
                : std::max<std::size_t>(1 << 20, static_cast<std::size_t>(rate / 8 * 2 * delay.count() / 1e6));
  const int a = open_tap(argv[1]), b = open_tap(argv[2]);
  Direction dirs[2];
  dirs[0].from = a, dirs[0].to = b;
  dirs[1].from = b, dirs[1].to = a;
  std::vector<unsigned char> scratch(65536);

  for (;;) {
    const auto now = Clock::now();
    // Release what is due; find when the next frame is.
    auto wait = std::chrono::nanoseconds(std::chrono::seconds(1));
    for (auto& d : dirs) {
      while (!d.queue.empty() && d.queue.front().due <= now) {
        const auto& f = d.queue.front();
        (void)::write(d.to, f.bytes.data(), f.bytes.size());  // a full TAP queue drops it, as a wire would
        d.queued_bytes -= f.bytes.size();
        d.queue.pop_front();
      }
      if (!d.queue.empty()) wait = std::min<std::chrono::nanoseconds>(wait, d.queue.front().due - now);
    }
    pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    const auto ns = std::max<long long>(0, wait.count());
    const timespec timeout{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    if (::ppoll(fds, 2, &timeout, nullptr) < 0 && errno != EINTR) {
      std::perror("delay_link: poll");
      return 1;
    }
    for (int i = 0; i < 2; ++i) {
      if (!(fds[i].revents & POLLIN)) continue;
      auto& d = dirs[i];
      for (;;) {
        const auto n = ::read(d.from, scratch.data(), scratch.size());
        if (n <= 0) break;
        const auto at = Clock::now();
        if (d.queued_bytes + static_cast<std::size_t>(n) > limit) {
          ++d.dropped;
          continue;
        }
        // The frame occupies the line for its bits at the rate, after the frames before it.
        const auto start = std::max(at, d.line_free);
        d.line_free = start + Micros(static_cast<long long>(n * 8 * 1e6 / rate));
        d.queue.push_back(Frame{d.line_free + delay, std::vector<unsigned char>(scratch.begin(), scratch.begin() + n)});
        d.queued_bytes += static_cast<std::size_t>(n);
      }
    }
  }
}
