#pragma once
// smbd's options: the flags and config-file keys (one CLI11 definition, so
// that `--config FILE` takes exactly the long flags), and the checks on
// their values that CLI11 cannot make. main.cpp runs with them; the config
// fuzz target (tests/fuzz/fuzz_config.cpp) parses untrusted files with them.
#include "limits.hpp"
#include "util/parse.hpp"

#include <CLI/CLI.hpp>

#include "transport/transport.hpp"

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace smb::server {

struct SmbdOptions {
  std::string listen = "0.0.0.0:7000";
  std::string capacity;
  std::string transport = "ucx";
  std::vector<std::string> transport_options;  // KEY=VALUE, the transport's own settings
  bool poll = false;
  unsigned spin_us = 50;
  std::string log_level = "info";
  std::string log_file;  // empty: stderr (the journal under systemd)
  std::string metrics;   // HOST:PORT for Prometheus; empty: not served
  double hello_timeout_s = 10;
  double frame_timeout_s = 30;
  double lock_grace_s = 2;
  std::string auth_token_file;
  ConnectionLimits connections;
  SessionQuotas quotas;
  // Where the options came from: --config's (or --check-config's) file, and
  // whether to stop after checking them.
  std::string config_file;
  bool check_only = false;
  // Every option's value, one `key = value` line each (CLI11's writer): what
  // a reload compares to see which options changed.
  std::string settings;
};

// Parses smbd's command line, and the config file it names, into `options`
// (`args` without the program name). `--check-config FILE` reads FILE as
// --config does and sets check_only. Returns the exit code when smbd should
// stop here (--help: 0; a bad flag or file: CLI11's code, with its message
// on `err`), nothing when it should go on.
std::optional<int> parse_command_line(const std::vector<std::string>& args, SmbdOptions& options, std::ostream& out,
                                      std::ostream& err);

// Defines every flag (and so every config key) on `app`, writing into `options`.
void add_options(CLI::App& app, SmbdOptions& options);

// The values CLI11 only stores: the listen address, the capacity, the
// timeouts (into options.connections). Throws smb::Error(invalid_argument)
// naming the flag.
struct CheckedOptions {
  util::HostPort listen;
  std::uint64_t capacity = 0;
  transport::TransportOptions transport_options;  // --transport-option, keys known to --transport
};
CheckedOptions check_options(SmbdOptions& options);

}  // namespace smb::server
