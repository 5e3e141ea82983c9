#pragma once
// Telling a service manager how smbd is doing (systemd's Type=notify, see
// deploy/systemd/): READY once clients can connect and the pool is whole, RELOADING around a
// SIGHUP, STOPPING on the way out, and watchdog pings from the event loop
// when the unit sets WatchdogSec (a hung loop then gets smbd restarted).
// Without a service manager (no $NOTIFY_SOCKET), or in a build without
// libsystemd, every call does nothing.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <functional>
#include <string>

namespace smb::server {

class ServiceNotifier {
 public:
  explicit ServiceNotifier(boost::asio::io_context& io);
  // Until ready(): STATUS=starting() every second, each time extending the
  // start timeout by 10 s, so that a large pool being faulted in is not
  // killed by TimeoutStartSec while it makes progress.
  void starting(std::function<std::string()> status);
  void ready(const std::string& status);
  void reloading();
  void stopping();

 private:
  void ping();
  void tell_progress();
  boost::asio::steady_timer watchdog_;
  boost::asio::steady_timer progress_;
  std::function<std::string()> starting_;
  std::chrono::microseconds interval_{0};  // half of WatchdogSec; 0: no watchdog
  bool pinging_ = false;
};

}  // namespace smb::server
