#pragma once
// smbd's options: the flags and config-file keys (one CLI11 definition, so
// that `--config FILE` takes exactly the long flags), and the checks on
// their values that CLI11 cannot make. main.cpp runs with them; the config
// fuzz target (tests/fuzz/fuzz_config.cpp) parses untrusted files with them.
#include "limits.hpp"
#include "util/parse.hpp"

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace smb::server {

struct SmbdOptions {
  std::string listen = "0.0.0.0:7000";
  std::string capacity;
  std::string transport = "ucx";
  bool poll = false;
  unsigned spin_us = 50;
  std::string log_level = "info";
  double hello_timeout_s = 10;
  double frame_timeout_s = 30;
  std::string auth_token_file;
  ConnectionLimits connections;
  SessionQuotas quotas;
};

// Defines every flag (and so every config key) on `app`, writing into `options`.
void add_options(CLI::App& app, SmbdOptions& options);

// The values CLI11 only stores: the listen address, the capacity, the
// timeouts (into options.connections). Throws smb::Error(invalid_argument)
// naming the flag.
struct CheckedOptions {
  util::HostPort listen;
  std::uint64_t capacity = 0;
};
CheckedOptions check_options(SmbdOptions& options);

}  // namespace smb::server
