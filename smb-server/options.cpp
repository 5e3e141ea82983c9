#include "options.hpp"

#include "config_file.hpp"

#include "protocol/layout_codec.hpp"
#include "transport/registry.hpp"

#include <smb/client.hpp>
#include <smb/error.hpp>

#include <algorithm>
#include <ostream>

namespace smb::server {

namespace {
std::chrono::milliseconds seconds_flag(double seconds, const char* flag) {
  if (!(seconds > 0 && seconds <= 86400))
    throw Error(Errc::invalid_argument, std::string(flag) + " must be more than 0 and at most 86400 seconds");
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
}
}  // namespace

void add_options(CLI::App& app, SmbdOptions& options) {
  app.set_config("--config", "", "Read options from a TOML file (keys as the long flags; see deploy/smbd.toml)");
  app.config_formatter(std::make_shared<TomlConfig>(app));
  // For --help only: parse_command_line turns `--check-config FILE` into
  // `--config FILE` before CLI11 sees it, so that the file is read as --config reads it.
  app.add_option("--check-config", options.config_file,
                 "Check this config file (TOML, as --config reads it) and the options in it, then exit: 0 if smbd "
                 "would start with them")
      ->configurable(false);
  app.add_option("--listen", options.listen, "HOST:PORT for the control plane (port 0: any)")
      ->capture_default_str();
  app.add_option("--capacity", options.capacity, "Memory to lend, e.g. 128M, 4G")->required();
  std::string transports_help = "Data transport, one of this build's:";
  for (const auto* t : transport::transports())
  {
    transports_help += "\n  " + std::string(t->name) + ": " + std::string(t->summary);
    for (const auto& o : t->options)
      transports_help += "\n    --transport-option " + std::string(o.key) + "=...: " + std::string(o.help);
  }
  app.add_option("--transport", options.transport, transports_help)
      ->check(CLI::IsMember(transport::transport_names()))
      ->capture_default_str();
  app.add_option("--transport-option", options.transport_options,
                 "KEY=VALUE, repeatable: a setting of the transport's own (e.g. tcp's port=7001, for a firewall); "
                 "--transport lists each transport's")
      ->type_name("KEY=VALUE");
  app.add_flag("--poll", options.poll,
               "Busy-poll the transport's progress: lowest latency for small calls, one core kept busy "
               "(default: sleep when idle)");
  app.add_option("--spin-us", options.spin_us,
                 "Without --poll: after work, keep polling this many microseconds before sleeping, so a chain "
                 "of small calls finds the server awake (0: sleep at once)")
      ->check(CLI::Range(0u, 1'000'000u))
      ->capture_default_str();
  app.add_option("--auth-token-file", options.auth_token_file,
                 "File holding a shared secret clients must prove they know (challenge-response, never sent); "
                 "clients give theirs with SMB_AUTH_TOKEN_FILE");
  app.add_option("--log-level", options.log_level, "trace, debug, info, warn, error (SIGHUP reloads it from --config)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_option("--log-file", options.log_file,
                 "Append the log to this file instead of stderr; SIGHUP reopens it (for logrotate)");
  app.add_option("--metrics", options.metrics,
                 "Serve Prometheus metrics (GET /metrics) on HOST:PORT, e.g. 0.0.0.0:9470 (docs/operations.md)");
  auto* limits = "Limits (what one client may take; see docs/reliability.md)";
  app.add_option("--max-connections", options.connections.max_connections,
                 "Control connections at once (0: from the open-file limit)")
      ->group(limits)
      ->capture_default_str();
  app.add_option("--hello-timeout", options.hello_timeout_s, "Seconds a new connection has to say hello")
      ->group(limits)
      ->capture_default_str();
  app.add_option("--frame-timeout", options.frame_timeout_s, "Seconds a started frame has to arrive whole")
      ->group(limits)
      ->capture_default_str();
  app.add_option("--max-segments-per-client", options.quotas.segments, "Segment handles one client may hold")
      ->group(limits)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-layouts-per-client", options.quotas.layouts, "Layout records one client may create")
      ->group(limits)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-layout-bytes-per-client", options.quotas.layout_bytes,
                 "Bytes of layout records one client may create")
      ->group(limits)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-locks-per-client", options.quotas.locks, "Locks one client may hold")
      ->group(limits)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--lock-grace", options.lock_grace_s,
                 "Seconds after a start in which a lock kept on two servers is granted here only to its holder "
                 "restoring it (docs/reliability.md)")
      ->group(limits)
      ->capture_default_str();
}

std::optional<int> parse_command_line(const std::vector<std::string>& args, SmbdOptions& options, std::ostream& out,
                                      std::ostream& err) {
  // `--check-config FILE` is `--config FILE` that stops after the checks:
  // CLI11 reads the file it names the same way.
  std::vector<std::string> reversed;  // CLI11 takes the arguments last first
  bool check_only = false;
  for (auto arg = args.rbegin(); arg != args.rend(); ++arg) {
    if (*arg == "--check-config") {
      check_only = true;
      reversed.emplace_back("--config");
    } else if (arg->rfind("--check-config=", 0) == 0) {
      check_only = true;
      reversed.push_back("--config=" + arg->substr(std::string("--check-config=").size()));
    } else {
      reversed.push_back(*arg);
    }
  }
  CLI::App app{"smbd: Soft Memory Box memory server"};
  add_options(app, options);
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    std::string file;
    if (const auto* config = app.get_config_ptr(); config && config->count() > 0) file = config->as<std::string>();
    // The file was what was asked about: what is wrong with it, exit 1
    // (not CLI11's code and its --help hint, which are about flags).
    if (check_only && e.get_exit_code() != 0) {
      if (file.empty())
        err << "--check-config: give the config file to check: smbd --check-config FILE\n";
      else
        err << file << ": " << e.what() << '\n';
      return 1;
    }
    // A file's fault: say which file.
    if (!file.empty() && dynamic_cast<const CLI::ConfigError*>(&e)) err << file << ": ";
    return app.exit(e, out, err);
  }
  if (const auto* config = app.get_config_ptr(); config && config->count() > 0)
    options.config_file = config->as<std::string>();
  options.check_only = check_only;
  options.settings = app.config_to_str(/*default_also=*/true, /*write_description=*/false);
  return std::nullopt;
}

CheckedOptions check_options(SmbdOptions& options) {
  CheckedOptions checked;
  checked.listen = util::parse_host_port(options.listen, /*allow_zero_port=*/true);
  checked.capacity = parse_size(options.capacity);
  if (checked.capacity > protocol::kMaxServerCapacity)
    throw Error(Errc::invalid_argument, "--capacity " + options.capacity + " is more than the 256 TiB one smbd can lend");
  if (!options.metrics.empty()) util::parse_host_port(options.metrics, /*allow_zero_port=*/false);
  options.connections.hello_timeout = seconds_flag(options.hello_timeout_s, "--hello-timeout");
  options.connections.frame_timeout = seconds_flag(options.frame_timeout_s, "--frame-timeout");
  if (!(options.lock_grace_s >= 0 && options.lock_grace_s <= 3600))
    throw Error(Errc::invalid_argument, "--lock-grace must be 0 to 3600 seconds");
  options.quotas.lock_grace = std::chrono::milliseconds(static_cast<std::int64_t>(options.lock_grace_s * 1000));
  for (const auto& item : options.transport_options) {
    const auto equals = item.find('=');
    if (equals == std::string::npos || equals == 0)
      throw Error(Errc::invalid_argument, "--transport-option " + util::quoted(item) + ": expected KEY=VALUE");
    checked.transport_options[item.substr(0, equals)] = item.substr(equals + 1);
  }
  transport::check_options(transport::find_transport(options.transport), checked.transport_options);
  return checked;
}

}  // namespace smb::server
