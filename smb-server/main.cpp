// smbd: a Soft Memory Box memory server. Lends a pool of its RAM to clients,
// which reach it with one-sided RMA; see docs/architecture.md.
#include "control_server.hpp"
#include "daemon_log.hpp"
#include "memory_pool.hpp"
#include "options.hpp"
#include "pool_populator.hpp"
#include "protocol/credential.hpp"
#include "protocol/layout_codec.hpp"
#include "registry.hpp"
#include "reload.hpp"
#include "service_notify.hpp"
#include "transport/registry.hpp"
#include "util/parse.hpp"
#include "util/random_id.hpp"

#include <smb/client.hpp>
#include <smb/host_checks.hpp>

#include <spdlog/spdlog.h>
#include <boost/asio.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

namespace {

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

// This host's checks for its transport and pool (smbctl doctor shows the
// same, and asks running servers for theirs), logged once: what is not ok
// with its fix, before a client runs into it.
void log_host_checks(std::string_view transport, std::uint64_t pool_bytes) {
  using Level = smb::HostFinding::Level;
  try {
    unsigned ok = 0;
    for (const auto& f : smb::check_this_host({.transport = std::string(transport), .pinned_bytes = pool_bytes})) {
      if (f.level == Level::ok) {
        ++ok;
        spdlog::debug("host check {}: {}", f.check, f.detail);
        continue;
      }
      const auto level = f.level == Level::fail   ? spdlog::level::err
                         : f.level == Level::warn ? spdlog::level::warn
                                                  : spdlog::level::info;
      spdlog::log(level, "host check {}: {}{}", f.check, f.detail, f.fix.empty() ? "" : "; fix: " + f.fix);
    }
    spdlog::info("host checks: {} ok ('smbctl doctor' lists them)", ok);
  } catch (const std::exception& e) {
    spdlog::warn("host checks could not run: {}", e.what());
  }
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

// --check-config: every check smbd makes before it takes memory or a port.
int check_only(smb::server::SmbdOptions& options) {
  const auto [listen, capacity, transport_options] = smb::server::check_options(options);
  if (!options.auth_token_file.empty()) {
    std::string warning;
    smb::protocol::read_shared_secret(options.auth_token_file, "--auth-token-file", &warning);
    if (!warning.empty()) std::cout << "warning: " << warning << "\n";
  }
  std::cout << options.config_file << ": valid (listen " << listen.host << ":" << listen.port << ", capacity "
            << smb::util::format_bytes(capacity) << ", transport " << options.transport << ")" << std::endl;
  return 0;
}

int run(const std::vector<std::string>& args, smb::server::SmbdOptions options, smb::server::DaemonLog& log) {
  namespace asio = boost::asio;
  const auto [listen, capacity, transport_options] = smb::server::check_options(options);
  apply_fd_limit(options.connections);
  if (!options.auth_token_file.empty()) {
    std::string warning;
    options.connections.auth_secret =
        smb::protocol::read_shared_secret(options.auth_token_file, "--auth-token-file", &warning);
    if (!warning.empty()) spdlog::warn("{}", warning);
  }

  auto transport = smb::transport::make_server_transport(options.transport, transport_options);
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
  smb::server::ServerIdentity identity{"", transport->name(), transport->address(), smb::util::random_id()};
  std::unique_ptr<smb::server::ControlServer> control;
  try {
    control = std::make_unique<smb::server::ControlServer>(io, endpoint, registry, identity, options.connections,
                                                           options.quotas, transport_options);
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

  transport->start([&registry](std::uint64_t id, std::string_view scope) { return registry.store().resolve(id, scope); },
                   [&control](smb::transport::Bytes frame, smb::transport::Bytes payload, std::string_view scope,
                              smb::transport::Respond respond) {
                     control->serve_call(std::move(frame), std::move(payload), scope, std::move(respond));
                   },
                   smb::transport::ServerTuning{.busy_poll = options.poll,
                                                              .spin = std::chrono::microseconds(options.spin_us)},
                   control->tickets().admission());
  control->metrics().count_traffic(transport->traffic());
  control->start();
  if (!options.metrics.empty()) {
    control->serve_metrics(options.metrics);
    spdlog::info("metrics on http://{}/metrics", options.metrics);
  }

  smb::server::ServiceNotifier notifier(io);
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    spdlog::info("signal {}: closing clients and exiting", signal);
    notifier.stopping();
    control->shutdown();
    io.stop();
  });
  const std::string status = "serving " + smb::util::format_bytes(pool.size()) + " on " + identity.address;
  // READY goes to the service manager once the pool is whole; before that a
  // reload changes nothing it needs to hear of.
  bool pool_whole = false;
  asio::signal_set hangups(io, SIGHUP);
  std::function<void(const boost::system::error_code&, int)> on_hangup = [&](const boost::system::error_code& ec, int) {
    if (ec) return;
    if (pool_whole) notifier.reloading();
    smb::server::reload(args, options, log, *control);
    if (pool_whole) notifier.ready(status);
    hangups.async_wait(on_hangup);
  };
  hangups.async_wait(on_hangup);

  spdlog::info("pool of {} ({} pages), transport {}: serving now, faulting it in meanwhile",
               smb::util::format_bytes(pool.size()), pool.huge_pages() ? "huge" : "normal", transport->name());
  log_host_checks(transport->name(), pool.size());
  notifier.starting([&] {
    return "serving on " + identity.address + "; faulting in the pool: " +
           smb::util::format_bytes(pool.populated()) + " of " + smb::util::format_bytes(pool.size());
  });
  // Declared after the registry: it stops before the pool's registration goes.
  smb::server::PoolPopulator populator(pool, [&](std::chrono::milliseconds took, const std::string& error) {
    asio::post(io, [&, took, error] {
      if (error.empty())
        spdlog::info("pool of {} in place after {} ms", smb::util::format_bytes(pool.size()), took.count());
      else
        spdlog::warn("{}", error);
      pool_whole = true;
      notifier.ready(status);
    });
  });
  std::cout << "smbd ready on " << identity.address << std::endl;
  run_io(io);
  transport->stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  smb::server::SmbdOptions options;
  try {
    if (const auto exit_code = smb::server::parse_command_line(args, options, std::cout, std::cerr)) return *exit_code;
  } catch (const std::exception& e) {  // a config value CLI11 failed on other than by its own errors
    std::cerr << "smbd: bad options: " << e.what() << std::endl;
    return 2;
  }
  try {
    if (options.check_only) return check_only(options);
    smb::server::DaemonLog log(options.log_file, options.log_level);
    return run(args, std::move(options), log);
  } catch (const std::exception& e) {
    std::cerr << "smbd: " << (options.check_only ? options.config_file + ": " : "") << e.what() << std::endl;
    return 1;
  }
}
