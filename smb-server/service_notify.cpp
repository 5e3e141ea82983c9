#include "service_notify.hpp"

#if SMB_WITH_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include <spdlog/spdlog.h>

#include <cstring>

namespace smb::server {

namespace {
void notify([[maybe_unused]] const std::string& state) {
#if SMB_WITH_SYSTEMD
  if (const int rc = sd_notify(0, state.c_str()); rc < 0)
    spdlog::warn("cannot tell the service manager '{}': {}", state, std::strerror(-rc));
#endif
}
}  // namespace

ServiceNotifier::ServiceNotifier(boost::asio::io_context& io) : watchdog_(io), progress_(io) {
#if SMB_WITH_SYSTEMD
  std::uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) interval_ = std::chrono::microseconds(usec / 2);
#endif
}

void ServiceNotifier::starting(std::function<std::string()> status) {
  starting_ = std::move(status);
  tell_progress();
}

void ServiceNotifier::tell_progress() {
  notify("STATUS=" + starting_() + "\nEXTEND_TIMEOUT_USEC=10000000");
  progress_.expires_after(std::chrono::seconds(1));
  progress_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && starting_) tell_progress();
  });
}

void ServiceNotifier::ready(const std::string& status) {
  starting_ = nullptr;
  progress_.cancel();
  notify("READY=1\nSTATUS=" + status);
  if (interval_.count() > 0 && !pinging_) {
    pinging_ = true;
    ping();
  }
}

void ServiceNotifier::reloading() { notify("RELOADING=1"); }

void ServiceNotifier::stopping() {
  notify("STOPPING=1");
  watchdog_.cancel();
  starting_ = nullptr;
  progress_.cancel();
}

// On the event loop itself: a loop stuck in a handler stops pinging.
void ServiceNotifier::ping() {
  notify("WATCHDOG=1");
  watchdog_.expires_after(interval_);
  watchdog_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) ping();
  });
}

}  // namespace smb::server
