#pragma once
// smbd's log: stderr (the journal under systemd), or --log-file. The file
// is reopened on SIGHUP, so that logrotate can move it away and smbd goes
// on in a new one (as nginx and Redis do): the logger keeps one
// distributing sink whose target is swapped under its own lock, never the
// logger itself, which other threads may be using.
#include <spdlog/sinks/dist_sink.h>

#include <memory>
#include <string>

namespace smb::server {

class DaemonLog {
 public:
  // Makes the default logger. Throws smb::Error(invalid_argument) when the
  // file cannot be opened for appending.
  DaemonLog(std::string file, const std::string& level);
  // Opens the file again (a new one when it was moved); an error is logged
  // to the file still open, which stays in use.
  void reopen();
  void set_level(const std::string& level);
  const std::string& file() const { return file_; }

 private:
  std::string file_;
  std::shared_ptr<spdlog::sinks::dist_sink_mt> sink_;
};

}  // namespace smb::server
