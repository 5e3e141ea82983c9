#include "tool_setup.hpp"

#include <smb/error.hpp>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace smb::tools {

void init_logging(bool verbose) {
  auto logger = spdlog::stderr_color_mt("smb-tool");
  logger->set_pattern("[%l] %v");
  spdlog::set_default_logger(std::move(logger));
  spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::warn);
}

ClientOptions client_options(const std::optional<std::string>& servers_flag) {
  ClientOptions options;
  if (servers_flag) {
    options.servers = parse_server_list(*servers_flag);
    if (options.servers.empty())
      throw Error(Errc::invalid_argument, "--servers '" + *servers_flag + "' names no server");
  }
  return options;
}

}  // namespace smb::tools
