// smbctl doctor: what this host and every server need for the fabric,
// checked before anything fails, each problem with the command that fixes
// it. Stages are probed one at a time (the control port, the hello and the
// transport's wire-up, the data path), each within the timeout, so that a
// failure names the stage it happened in.
#include "commands.hpp"
#include "table.hpp"

#include <smb/client.hpp>
#include <smb/error.hpp>
#include <util/parse.hpp>

#include <utility>  // (before Asio, whose awaitable.hpp uses std::exchange)

#include <boost/asio.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <cstdlib>
#include <regex>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace smb::smbctl {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using Level = HostFinding::Level;

constexpr std::uint64_t kProbeBytes = 1u << 20;  // the data path's large probe
constexpr std::uint64_t kSmallBytes = 4096;      // and its round trips
constexpr int kRoundTrips = 8;
constexpr auto kSkewWarn = std::chrono::milliseconds(500);

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

std::string fixed(double value, int decimals = 1) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

// One row of the report: a host finding, or a stage of a server's probe.
struct Row {
  std::string where;  // "this host" or "host:port"
  HostFinding finding;
};

// The control port alone: a TCP connect, timed (a firewall or a wrong port
// shows here, before any protocol).
HostFinding control_port(const std::string& server, std::chrono::milliseconds timeout, double& took_ms) {
  namespace asio = boost::asio;
  const auto at = util::parse_host_port(server);
  const auto port = std::to_string(at.port);
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  asio::ip::tcp::resolver resolver(io);
  boost::system::error_code failed = asio::error::timed_out;
  const auto started = Clock::now();
  resolver.async_resolve(at.host, port,
                         [&](const boost::system::error_code& ec, const asio::ip::tcp::resolver::results_type& to) {
                           if (ec) {
                             failed = ec;
                             return;
                           }
                           asio::async_connect(socket, to, [&](const boost::system::error_code& e, const auto&) {
                             failed = e;
                           });
                         });
  io.run_for(timeout);
  took_ms = ms(Clock::now() - started);
  if (!failed) return {Level::ok, "control port", "TCP connect in " + fixed(took_ms, 2) + " ms", ""};
  return {Level::fail, "control port", "TCP connect: " + failed.message() + " after " + fixed(took_ms, 0) + " ms",
          "is smbd running there ('systemctl status smbd', 'ss -ltnp | grep " + port +
              "')? Is TCP port " + port + " open in the firewalls between?"};
}

// The data path: a buffer on this server alone, written and read back.
struct DataProbe {
  HostFinding finding;
  std::string path;  // the transport and lanes (Client::describe_paths)
  double round_trip_us = 0, write_mib_s = 0, read_mib_s = 0;
};

DataProbe data_path(Client& client, const std::string& server) {
  DataProbe p;
  p.finding.check = "data path";
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string name = "smbctl-doctor/" + std::string(host) + "-" + std::to_string(::getpid());
  std::vector<std::byte> out(kProbeBytes), in(kProbeBytes);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>((i * 131 + 7) & 0xff);
  try {
    BufferOptions options;
    options.servers = {server};
    struct Remove {  // whatever happens below, once the buffer below is closed
      Client& c;
      const std::string& n;
      bool created = false;
      ~Remove() {
        try {
          if (created) c.destroy(n);
        } catch (const Error&) {
        }
      }
    } remove{client, name};
    auto buffer = client.create(name, kProbeBytes, options);
    remove.created = true;
    const auto small = std::span(out).first(kSmallBytes);
    std::vector<double> trips;
    for (int k = 0; k < kRoundTrips; ++k) {
      const auto started = Clock::now();
      buffer.write(0, small);
      buffer.read(0, std::span(in).first(kSmallBytes));
      trips.push_back(ms(Clock::now() - started) * 1000);
    }
    std::sort(trips.begin(), trips.end());
    p.round_trip_us = trips[trips.size() / 2];
    auto started = Clock::now();
    buffer.write(0, out);
    const double mib = static_cast<double>(kProbeBytes) / (1u << 20);
    p.write_mib_s = mib / (ms(Clock::now() - started) / 1000);
    started = Clock::now();
    buffer.read(0, in);
    p.read_mib_s = mib / (ms(Clock::now() - started) / 1000);
    if (in != out) {
      p.finding = {Level::fail, "data path", "1 MiB written and read back differs",
                   "report this: smbctl -v doctor output and both hosts' smbd logs"};
      return p;
    }
    for (const auto& line : client.describe_paths()) p.path += (p.path.empty() ? "" : "; ") + line;
    p.finding = {Level::ok, "data path",
                 "4 KiB write+read " + fixed(p.round_trip_us, 0) + " us (median of " + std::to_string(kRoundTrips) +
                     "), 1 MiB write " + fixed(p.write_mib_s, 0) + " MiB/s, read " + fixed(p.read_mib_s, 0) +
                     " MiB/s (one probe; smb-bench measures)",
                 ""};
  } catch (const Error& e) {
    if (e.code() == Errc::permission_denied) {
      p.finding = {Level::note, "data path", std::string("not probed: ") + e.what(),
                   "run doctor with the fabric's secret (SMB_AUTH_TOKEN_FILE) to probe the data path"};
    } else if (e.code() == Errc::no_space) {
      p.finding = {Level::warn, "data path", std::string("not probed, the server is full: ") + e.what(),
                   "smbctl ls, then smbctl rm what is not needed"};
    } else {
      p.finding = {Level::fail, "data path", e.what(),
                   "smbctl -v doctor shows the transport's wire-up; for RDMA check the port, the GID and that UDP "
                   "port 4791 (RoCE v2) is open between the hosts"};
    }
  }
  return p;
}

// "active MTU 1024" in an rdma port finding, or 0.
unsigned active_mtu(const HostFinding& f) {
  static const std::regex pattern("active MTU ([0-9]+)");
  std::smatch m;
  if (f.check.rfind("rdma port ", 0) != 0 || !std::regex_search(f.detail, m, pattern)) return 0;
  return static_cast<unsigned>(std::stoul(m[1]));
}

std::set<unsigned> active_mtus(const std::vector<HostFinding>& findings) {
  std::set<unsigned> out;
  for (const auto& f : findings)
    if (const auto mtu = active_mtu(f)) out.insert(mtu);
  return out;
}

json finding_json(const Row& row) {
  return {{"where", row.where}, {"check", row.finding.check}, {"level", host_level_name(row.finding.level)},
          {"detail", row.finding.detail}, {"fix", row.finding.fix}};
}

}  // namespace

bool run_doctor(const DoctorOptions& options, bool json_output) {
  std::vector<Row> rows;
  json servers = json::array();
  HostCheckOptions local{.transport = options.transport, .pinned_bytes = options.capacity, .connections = 0};
  const auto here = check_this_host(local);
  for (const auto& f : here) rows.push_back({"this host", f});
  const auto local_mtus = active_mtus(here);

  for (const auto& server : options.servers) {
    json report{{"address", server}};
    double connect_ms = 0;
    auto port = control_port(server, options.timeout, connect_ms);
    report["control_port_ms"] = connect_ms;
    const bool port_open = port.level == Level::ok;
    rows.push_back({server, std::move(port)});
    if (!port_open) {
      report["reachable"] = false;
      servers.push_back(std::move(report));
      continue;
    }
    ClientOptions client_options;
    client_options.servers = {server};
    client_options.timeout = options.timeout;
    client_options.transport = options.transport;
    client_options.auth_token_file = options.auth_token_file;
    const auto started = Clock::now();
    try {
      Client client(client_options);
      const double hello_ms = ms(Clock::now() - started);
      report["hello_ms"] = hello_ms;
      rows.push_back({server, {Level::ok, "hello", "session and transport wire-up in " + fixed(hello_ms, 1) + " ms", ""}});
      auto diagnosis = client.diagnose().front();
      if (diagnosis.reachable) {
        const double offset = std::chrono::duration<double, std::milli>(diagnosis.clock_offset).count();
        const double within = std::chrono::duration<double, std::milli>(diagnosis.clock_uncertainty).count();
        report["clock_offset_ms"] = offset;
        report["clock_uncertainty_ms"] = within;
        const bool skewed = std::abs(offset) - within > ms(kSkewWarn);
        rows.push_back({server,
                        {skewed ? Level::warn : Level::ok, "clock",
                         "offset " + fixed(offset, 1) + " ms (within " + fixed(within, 1) + " ms) of this host's" +
                             (skewed ? ": a credential's expiry is checked by the server's clock" : ""),
                         skewed ? "timedatectl set-ntp true on both hosts (chronyc tracking shows the sync)" : ""}});
        for (const auto& f : diagnosis.findings) rows.push_back({server + " (its host)", f});
        const auto theirs = active_mtus(diagnosis.findings);
        if (!local_mtus.empty() && !theirs.empty() && *local_mtus.rbegin() != *theirs.rbegin())
          rows.push_back({server,
                          {Level::warn, "mtu",
                           "RDMA MTU " + std::to_string(*local_mtus.rbegin()) + " here, " +
                               std::to_string(*theirs.rbegin()) + " there: connections use the smaller",
                           "the same 'ip link set IFACE mtu N' on both hosts (and every switch port between)"}});
      } else {
        rows.push_back({server, {Level::fail, "diagnose", diagnosis.error, ""}});
      }
      auto probe = data_path(client, server);
      report["data_path"] = {{"round_trip_us", probe.round_trip_us},
                             {"write_mib_s", probe.write_mib_s},
                             {"read_mib_s", probe.read_mib_s},
                             {"path", probe.path}};
      rows.push_back({server, probe.finding});
      if (!probe.path.empty()) rows.push_back({server, {Level::ok, "transport", probe.path, ""}});
      report["reachable"] = true;
    } catch (const Error& e) {
      rows.push_back({server,
                      {Level::fail, "hello", std::string(e.what()) + " (after " + fixed(ms(Clock::now() - started), 0) +
                                                 " ms)",
                       "the control port answers, so: the same transport on both sides (smbd --transport, "
                       "SMB_TRANSPORT), the fabric's secret (SMB_AUTH_TOKEN_FILE), the same smbd version"}});
      report["reachable"] = false;
    }
    servers.push_back(std::move(report));
  }

  const auto blocking = std::count_if(rows.begin(), rows.end(), [](const Row& r) { return r.finding.level == Level::fail; });
  if (json_output) {
    json findings = json::array();
    for (const auto& r : rows) findings.push_back(finding_json(r));
    std::cout << json{{"findings", findings}, {"servers", servers}, {"blocking", blocking}}.dump(2) << '\n';
    return blocking > 0;
  }
  Table table({"", "WHERE", "CHECK", "FOUND"});
  for (const auto& r : rows) {
    table.add_row({host_level_name(r.finding.level), r.where, r.finding.check, r.finding.detail});
    if (!r.finding.fix.empty()) table.add_row({"", "", "  fix:", r.finding.fix});
  }
  table.print(std::cout);
  std::cout << '\n'
            << (blocking > 0 ? std::to_string(blocking) + " problem(s) block the fabric: fix those marked 'fail' first"
                             : std::string("nothing blocks"))
            << (options.servers.empty() ? " (no servers given: --servers or SMB_SERVERS probes them too)" : "") << '\n';
  return blocking > 0;
}

}  // namespace smb::smbctl
