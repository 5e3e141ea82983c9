// smbd: a Soft Memory Box memory server. Lends a pool of its RAM to clients,
// which reach it with one-sided RMA; see docs/architecture.md.
#include "control_server.hpp"
#include "memory_pool.hpp"
#include "registry.hpp"
#include "transport/transport.hpp"
#include "util/parse.hpp"

#include <smb/client.hpp>

#include <CLI/CLI.hpp>
#include <boost/asio.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <iostream>

namespace {

struct Options {
  std::string listen = "0.0.0.0:7000";
  std::string capacity;
  std::string transport = "ucx";
  std::string log_level = "info";
};

int run(const Options& options) {
  namespace asio = boost::asio;
  const auto listen = smb::util::parse_host_port(options.listen, /*allow_zero_port=*/true);
  const std::uint64_t capacity = smb::parse_size(options.capacity);

  auto transport = smb::transport::make_server_transport(options.transport);
  smb::server::MemoryPool pool(capacity);
  smb::server::Registry registry(pool, *transport);

  asio::io_context io;
  asio::ip::tcp::endpoint endpoint;
  try {
    endpoint = asio::ip::tcp::endpoint(asio::ip::make_address(listen.host), listen.port);
  } catch (const std::exception&) {
    throw smb::Error(smb::Errc::invalid_argument,
                     "--listen host '" + listen.host + "' is not an IP address of this machine");
  }
  smb::server::ServerIdentity identity{"", transport->name(), transport->address()};
  std::unique_ptr<smb::server::ControlServer> control;
  try {
    control = std::make_unique<smb::server::ControlServer>(io, endpoint, registry, identity);
  } catch (const boost::system::system_error& e) {
    throw smb::Error(smb::Errc::unreachable,
                     "cannot listen on " + options.listen + ": " + e.code().message() +
                         (e.code() == asio::error::address_in_use
                              ? " (another process uses this port: pick another with --listen HOST:PORT)"
                              : ""));
  }
  const auto bound = control->local_endpoint();
  identity.address = listen.host + ":" + std::to_string(bound.port());

  transport->start([&registry](std::uint64_t id) { return registry.resolve(id); },
                   [&control](smb::transport::Bytes frame, smb::transport::Bytes payload, smb::transport::Respond respond) {
                     control->serve_call(std::move(frame), std::move(payload), std::move(respond));
                   });
  control->start();

  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    spdlog::info("signal {}: closing clients and exiting", signal);
    control->shutdown();
    io.stop();
  });

  spdlog::info("pool of {} ({} pages), transport {}", smb::util::format_bytes(pool.size()),
               pool.huge_pages() ? "huge" : "normal", transport->name());
  std::cout << "smbd ready on " << identity.address << std::endl;
  io.run();
  transport->stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"smbd: Soft Memory Box memory server"};
  Options options;
  app.set_config("--config", "", "Read options from a TOML/INI file (keys as the long flags)");
  app.add_option("--listen", options.listen, "HOST:PORT for the control plane (port 0: any)")
      ->capture_default_str();
  app.add_option("--capacity", options.capacity, "Memory to lend, e.g. 128M, 4G")->required();
  app.add_option("--transport", options.transport, "Data transport")
      ->check(CLI::IsMember({"ucx", "verbs"}))
      ->capture_default_str();
  app.add_option("--log-level", options.log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto logger = spdlog::stderr_color_mt("smbd");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(options.log_level));
  try {
    return run(options);
  } catch (const std::exception& e) {
    std::cerr << "smbd: " << e.what() << std::endl;
    return 1;
  }
}
