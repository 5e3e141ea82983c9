// smbd: a Soft Memory Box memory server. Lends a pool of its RAM to clients,
// which reach it with one-sided RMA; see docs/architecture.md.
#include "control_server.hpp"
#include "memory_pool.hpp"
#include "options.hpp"
#include "protocol/auth.hpp"
#include "protocol/layout_codec.hpp"
#include "registry.hpp"
#include "transport/registry.hpp"
#include "util/parse.hpp"

#include <smb/client.hpp>

#include <CLI/CLI.hpp>
#include <boost/asio.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <sys/resource.h>

#include <algorithm>
#include <iostream>
#include <random>

namespace {

// This run's identity (ServerIdentity::instance): random, never 0 (0 is a
// layout made before servers had one).
std::uint64_t draw_instance() {
  std::random_device device;
  std::uint64_t id = 0;
  while (id == 0) id = (std::uint64_t{device()} << 32) | device();
  return id;
}

// Descriptors kept for everything that is not a control connection: the
// transport's own (UCX's sockets and shared memory, verbs' channels), logs.
constexpr rlim_t kReservedFds = 64;

// Raises the soft open-file limit to the hard one (as nginx and Redis do),
// and derives the connection limit from it unless --max-connections set one.
// A client may hold a few sockets here (its control connection, lock and
// barrier waits, UCX's TCP lanes), so each connection is budgeted four.
void apply_fd_limit(smb::server::ConnectionLimits& limits) {
  rlimit fds{};
  if (::getrlimit(RLIMIT_NOFILE, &fds) == 0 && fds.rlim_cur < fds.rlim_max) {
    rlimit raised = fds;
    raised.rlim_cur = fds.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) fds = raised;
  }
  const rlim_t usable = fds.rlim_cur == RLIM_INFINITY ? rlim_t{1} << 20 : fds.rlim_cur;
  const auto budget =
      static_cast<std::uint32_t>(std::clamp<rlim_t>((usable > kReservedFds ? usable - kReservedFds : 0) / 4, 16, 1'000'000));
  if (limits.max_connections == 0) {
    limits.max_connections = budget;
  } else if (limits.max_connections > budget) {
    spdlog::warn("--max-connections {} is more than {} open files allow (about {}): accepting may fail with "
                 "'too many open files' (raise ulimit -n)",
                 limits.max_connections, usable, budget);
  }
  spdlog::info("connections: at most {} (open-file limit {})", limits.max_connections, usable);
}

// A handler that throws must not end the daemon: log it and serve on (Asio's
// documented way; every request path already answers its own errors).
void run_io(boost::asio::io_context& io) {
  for (;;) {
    try {
      io.run();
      return;
    } catch (const std::exception& e) {
      spdlog::error("smbd: an event handler failed: {}; serving on", e.what());
    }
  }
}

int run(smb::server::SmbdOptions options) {
  namespace asio = boost::asio;
  const auto [listen, capacity] = smb::server::check_options(options);
  apply_fd_limit(options.connections);
  if (!options.auth_token_file.empty()) {
    std::string warning;
    options.connections.auth_secret =
        smb::protocol::read_secret_file(options.auth_token_file, "--auth-token-file", &warning);
    if (!warning.empty()) spdlog::warn("{}", warning);
  }

  auto transport = smb::transport::make_server_transport(options.transport);
  smb::server::MemoryPool pool(capacity);
  smb::server::Registry registry(pool, *transport, options.quotas);

  asio::io_context io;
  asio::ip::tcp::endpoint endpoint;
  try {
    endpoint = asio::ip::tcp::endpoint(asio::ip::make_address(listen.host), listen.port);
  } catch (const std::exception&) {
    throw smb::Error(smb::Errc::invalid_argument,
                     "--listen host '" + listen.host + "' is not an IP address of this machine");
  }
  smb::server::ServerIdentity identity{"", transport->name(), transport->address(), draw_instance()};
  std::unique_ptr<smb::server::ControlServer> control;
  try {
    control = std::make_unique<smb::server::ControlServer>(io, endpoint, registry, identity, options.connections,
                                                           options.quotas);
  } catch (const boost::system::system_error& e) {
    throw smb::Error(smb::Errc::unreachable,
                     "cannot listen on " + options.listen + ": " + e.code().message() +
                         (e.code() == asio::error::address_in_use
                              ? " (another process uses this port: pick another with --listen HOST:PORT)"
                              : ""));
  }
  if (options.connections.auth_secret.empty() && !endpoint.address().is_loopback())
    spdlog::warn("listening on {} without --auth-token-file: anyone who can reach this port can read, overwrite and "
                 "destroy every buffer here (docs/reliability.md, \"Authentication\")",
                 options.listen);
  const auto bound = control->local_endpoint();
  identity.address = listen.host + ":" + std::to_string(bound.port());

  transport->start([&registry](std::uint64_t id) { return registry.resolve(id); },
                   [&control](smb::transport::Bytes frame, smb::transport::Bytes payload, smb::transport::Respond respond) {
                     control->serve_call(std::move(frame), std::move(payload), std::move(respond));
                   },
                   smb::transport::ServerTuning{.busy_poll = options.poll,
                                                              .spin = std::chrono::microseconds(options.spin_us)});
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
  run_io(io);
  transport->stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"smbd: Soft Memory Box memory server"};
  smb::server::SmbdOptions options;
  smb::server::add_options(app, options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {  // a config value CLI11 failed on other than by its own errors
    std::cerr << "smbd: bad options: " << e.what() << std::endl;
    return 2;
  }

  auto logger = spdlog::stderr_color_mt("smbd");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(options.log_level));
  try {
    return run(std::move(options));
  } catch (const std::exception& e) {
    std::cerr << "smbd: " << e.what() << std::endl;
    return 1;
  }
}
