// smbd: a Soft Memory Box memory server. Lends a pool of its RAM to clients,
// which reach it with one-sided RMA; see docs/architecture.md.
#include "control_server.hpp"
#include "memory_pool.hpp"
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

struct Options {
  std::string listen = "0.0.0.0:7000";
  std::string capacity;
  std::string transport = "ucx";
  bool poll = false;
  unsigned spin_us = 50;
  std::string log_level = "info";
  double hello_timeout_s = 10;
  double frame_timeout_s = 30;
  std::string auth_token_file;
  smb::server::ConnectionLimits connections;
  smb::server::SessionQuotas quotas;
};

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

std::chrono::milliseconds seconds_flag(double seconds, const char* flag) {
  if (!(seconds > 0 && seconds <= 86400))
    throw smb::Error(smb::Errc::invalid_argument, std::string(flag) + " must be more than 0 and at most 86400 seconds");
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
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

int run(Options options) {
  namespace asio = boost::asio;
  const auto listen = smb::util::parse_host_port(options.listen, /*allow_zero_port=*/true);
  const std::uint64_t capacity = smb::parse_size(options.capacity);
  if (capacity > smb::protocol::kMaxServerCapacity)
    throw smb::Error(smb::Errc::invalid_argument,
                     "--capacity " + options.capacity + " is more than the 256 TiB one smbd can lend");
  options.connections.hello_timeout = seconds_flag(options.hello_timeout_s, "--hello-timeout");
  options.connections.frame_timeout = seconds_flag(options.frame_timeout_s, "--frame-timeout");
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
  Options options;
  app.set_config("--config", "", "Read options from a TOML/INI file (keys as the long flags)");
  app.add_option("--listen", options.listen, "HOST:PORT for the control plane (port 0: any)")
      ->capture_default_str();
  app.add_option("--capacity", options.capacity, "Memory to lend, e.g. 128M, 4G")->required();
  std::string transports_help = "Data transport, one of this build's:";
  for (const auto* t : smb::transport::transports())
    transports_help += "\n  " + std::string(t->name) + ": " + std::string(t->summary);
  app.add_option("--transport", options.transport, transports_help)
      ->check(CLI::IsMember(smb::transport::transport_names()))
      ->capture_default_str();
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
  app.add_option("--log-level", options.log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
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
  CLI11_PARSE(app, argc, argv);

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
