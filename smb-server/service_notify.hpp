#pragma once
// Telling a service manager how smbd is doing (systemd's Type=notify, see
// deploy/systemd/): READY once clients can connect, RELOADING around a
// SIGHUP, STOPPING on the way out, and watchdog pings from the event loop
// when the unit sets WatchdogSec (a hung loop then gets smbd restarted).
// Without a service manager (no $NOTIFY_SOCKET), or in a build without
// libsystemd, every call does nothing.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <string>

namespace smb::server {

class ServiceNotifier {
 public:
  explicit ServiceNotifier(boost::asio::io_context& io);
  void ready(const std::string& status);
  void reloading();
  void stopping();

 private:
  void ping();
  boost::asio::steady_timer watchdog_;
  std::chrono::microseconds interval_{0};  // half of WatchdogSec; 0: no watchdog
  bool pinging_ = false;
};

}  // namespace smb::server
