#pragma once
// SIGHUP (systemctl reload smbd): reopen the log file, then read the
// command line and --config again and apply what can change while clients
// are served -- the log level and the --auth-token-file secret (re-read
// even when its path is unchanged, so that a rotated secret takes effect
// for new connections). Every other changed option is logged as needing a
// restart; nothing is half-applied, and a config that no longer parses
// changes nothing.
#include "control_server.hpp"
#include "daemon_log.hpp"
#include "options.hpp"

#include <string>
#include <vector>

namespace smb::server {

// `running`: the options smbd runs with; updated with what was applied.
void reload(const std::vector<std::string>& args, SmbdOptions& running, DaemonLog& log, ControlServer& control);

}  // namespace smb::server
