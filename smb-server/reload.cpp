#include "reload.hpp"

#include "protocol/credential.hpp"

#include <spdlog/spdlog.h>

#include <set>
#include <sstream>

namespace smb::server {

namespace {
// The keys of `settings` lines (CLI11's `key=value` writer) whose value
// differs from those in `before`.
std::vector<std::string> changed_keys(const std::string& before, const std::string& after) {
  std::set<std::string> old_lines;
  std::istringstream in(before);
  for (std::string line; std::getline(in, line);) old_lines.insert(line);
  std::vector<std::string> keys;
  std::istringstream out(after);
  for (std::string line; std::getline(out, line);)
    if (!old_lines.contains(line)) keys.push_back(line.substr(0, line.find('=')));
  return keys;
}
}  // namespace

void reload(const std::vector<std::string>& args, SmbdOptions& running, DaemonLog& log, ControlServer& control) {
  log.reopen();
  SmbdOptions fresh;
  std::ostringstream out, err;
  if (const auto stop = parse_command_line(args, fresh, out, err)) {
    spdlog::error("SIGHUP: the options no longer parse, nothing changed: {}", err.str());
    return;
  }
  std::string secret;
  if (!fresh.auth_token_file.empty()) {
    try {
      std::string warning;
      secret = protocol::read_shared_secret(fresh.auth_token_file, "--auth-token-file", &warning);
      if (!warning.empty()) spdlog::warn("{}", warning);
    } catch (const std::exception& e) {
      spdlog::error("SIGHUP: nothing changed: {}", e.what());
      return;
    }
  }
  if (fresh.log_level != running.log_level) {
    log.set_level(fresh.log_level);
    spdlog::info("SIGHUP: log level now {}", fresh.log_level);
    running.log_level = fresh.log_level;
  }
  if (secret != control.limits().auth_secret)
    spdlog::info("SIGHUP: new connections now need {}", secret.empty() ? "no secret" : "the new secret");
  control.set_auth_secret(std::move(secret));
  running.auth_token_file = fresh.auth_token_file;
  // Against the options smbd started with: until a restart, each reload says
  // again what still waits for one.
  for (const auto& key : changed_keys(running.settings, fresh.settings))
    if (key != "log-level" && key != "auth-token-file")
      spdlog::warn("SIGHUP: '{}' changed; it takes effect at the next restart", key);
}

}  // namespace smb::server
