#include "daemon_log.hpp"

#include <smb/error.hpp>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace smb::server {

namespace {
spdlog::sink_ptr open_file(const std::string& file) {
  try {
    return std::make_shared<spdlog::sinks::basic_file_sink_mt>(file, /*truncate=*/false);
  } catch (const spdlog::spdlog_ex& e) {
    throw Error(Errc::invalid_argument, "--log-file " + file + ": " + e.what());
  }
}
}  // namespace

DaemonLog::DaemonLog(std::string file, const std::string& level)
    : file_(std::move(file)), sink_(std::make_shared<spdlog::sinks::dist_sink_mt>()) {
  if (file_.empty())
    sink_->add_sink(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  else
    sink_->add_sink(open_file(file_));
  auto logger = std::make_shared<spdlog::logger>("smbd", sink_);
  logger->flush_on(spdlog::level::info);  // a daemon's log is read while it runs (tail -f, journal)
  spdlog::set_default_logger(std::move(logger));
  set_level(level);
}

void DaemonLog::reopen() {
  if (file_.empty()) return;
  try {
    auto fresh = open_file(file_);
    sink_->set_sinks({std::move(fresh)});
    spdlog::info("log reopened");
  } catch (const Error& e) {
    spdlog::error("SIGHUP: cannot reopen the log, going on in the old file: {}", e.what());
  }
}

void DaemonLog::set_level(const std::string& level) { spdlog::set_level(spdlog::level::from_str(level)); }

}  // namespace smb::server
