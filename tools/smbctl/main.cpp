// smbctl: inspect and manage a Soft Memory Box fabric.
//   smbctl [--servers LIST] [--json] status | ls | info NAME | rm NAME | dump NAME --dtype T
//                                   | save NAME FILE | load FILE [NAME]
//                                   | repair [NAME] [--watch [--interval S]] [--onto SPARE,... [--replace LOST]
//                                            [--replace-after S]]
//                                   | status --watch | top  [--interval S] [--iterations N]
//                                   | credential create --prefix P [--expires D] [--out FILE]
//                                   | doctor [--capacity SIZE] [--transport T] [--timeout S]
// Exit status: 0 success, 1 a libsmb error, 2 a usage error, 3 the fabric is
// degraded (status, ls, info: a server unreachable or a buffer's share lost;
// repair: a buffer still degraded after it; doctor: something blocks the
// fabric; what could be seen is still printed).
#include "../common/tool_setup.hpp"
#include "../common/vector_elements.hpp"
#include "commands.hpp"

#include <smb/config.h>
#include <smb/error.hpp>

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <exception>
#include <iostream>
#include <map>
#include <optional>
#include <string>

int main(int argc, char** argv) {
  CLI::App app{"Inspect and manage the memory servers and buffers of a Soft Memory Box fabric.",
               "smbctl"};
  app.fallthrough();  // --servers/--json may also follow the subcommand
  app.require_subcommand(1);
  std::string servers_text;
  bool json = false;
  bool verbose = false;
  auto* servers_opt = app.add_option("--servers,-s", servers_text,
                                     "memory servers as host:port,host:port (default: $SMB_SERVERS)");
  app.add_flag("--json", json, "print one JSON document instead of a table");
  app.add_flag("--verbose,-v", verbose, "log libsmb's connection details to stderr");

  std::string name;
  auto* status = app.add_subcommand("status", "capacity, use, clients and buffers of every server");
  bool status_watch = false;
  double refresh_s = 2;
  std::optional<unsigned> iterations;
  const auto refresh_options = [&](CLI::App* command) {
    command->add_option("--interval", refresh_s, "seconds between refreshes (default 2)")
        ->check(CLI::Range(0.1, 86400.0));
    command->add_option("--iterations,-n", iterations, "refresh this many times, then exit (default: until stopped)")
        ->check(CLI::PositiveNumber);
  };
  status->add_flag("--watch", status_watch, "refresh every --interval seconds, until stopped");
  refresh_options(status);
  auto* top = app.add_subcommand("top", "live per-server rates (requests, vector ops, bytes), clients and use");
  refresh_options(top);
  auto* ls = app.add_subcommand("ls", "list the buffers: size, stripe unit, servers");
  auto* info = app.add_subcommand("info", "the layout of one buffer: its servers and their shares");
  info->add_option("name", name, "buffer name")->required();
  auto* rm = app.add_subcommand("rm", "destroy a buffer on every server");
  rm->add_option("name", name, "buffer name")->required();
  std::string file;
  auto* save = app.add_subcommand("save", "write a consistent snapshot of a buffer to a checkpoint file");
  save->add_option("name", name, "buffer name")->required();
  save->add_option("file", file, "checkpoint file to write (appears only once whole)")->required();
  auto* load = app.add_subcommand("load", "restore a checkpoint file into a new buffer (verified first)");
  load->add_option("file", file, "checkpoint file")->required()->check(CLI::ExistingFile);
  load->add_option("name", name, "buffer to create (default: the name it was saved from)");
  auto* repair = app.add_subcommand(
      "repair", "rebuild the copies restarted servers lost, and stale ones, from the other copies (replicated buffers)");
  repair->add_option("name", name, "buffer name (default: every replicated buffer)");
  bool watch = false;
  double interval = 10;
  repair->add_flag("--watch", watch, "repair whatever needs it every --interval seconds, until stopped");
  repair->add_option("--interval", interval, "seconds between --watch passes (default 10)")
      ->check(CLI::Range(0.1, 86400.0));
  smb::smbctl::Replacing replacing;
  double replace_after = 60;
  repair->add_option("--onto", replacing.spares,
                     "new, empty smbd (HOST:PORT) that take the place of a server lost for good, first the lost "
                     "server's copies rebuilt there; with --watch a comma-separated list of spares")
      ->delimiter(',');
  repair->add_option("--replace", replacing.lost, "the lost server --onto replaces (default: the one unreachable)");
  repair->add_option("--replace-after", replace_after,
                     "with --watch --onto: seconds a server stays unreachable before a spare takes its place "
                     "(default 60)")
      ->check(CLI::Range(0.0, 86400.0));
  auto* dump = app.add_subcommand("dump", "print elements of a buffer, one per line");
  dump->add_option("name", name, "buffer name")->required();
  std::string dtype;
  std::uint64_t offset = 0;
  std::optional<std::uint64_t> count;
  dump->add_option("--dtype", dtype, "element type")->required()->check(CLI::IsMember(smb::tools::dtype_names()));
  dump->add_option("--offset", offset, "first element (default 0)");
  dump->add_option("--count", count, "elements to print (default: to the end)");

  auto* credential = app.add_subcommand("credential", "per-job credentials: access to one name prefix only");
  credential->require_subcommand(1);
  auto* credential_create = credential->add_subcommand(
      "create", "derive a credential for one name prefix from the servers' shared secret (no server is asked)");
  std::string prefix, secret_file, out_path;
  std::uint64_t lifetime_s = 24 * 3600;
  credential_create->add_option("--prefix", prefix, "the names it opens start with this (job-17/)")->required();
  credential_create
      ->add_option("--expires", lifetime_s, "how long it is good for: 90s, 30m, 24h, 7d (default 24h)")
      ->transform(CLI::AsNumberWithUnit(std::map<std::string, std::uint64_t>{{"s", 1}, {"m", 60}, {"h", 3600},
                                                                              {"d", 86400}},
                                        CLI::AsNumberWithUnit::CASE_SENSITIVE))
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{10} * 366 * 86400));
  credential_create->add_option("--auth-token-file", secret_file,
                                "the servers' shared secret (default: $SMB_AUTH_TOKEN_FILE)");
  credential_create->add_option("--out,-o", out_path, "write it to this file, mode 600 (default: print it)");

  auto* doctor = app.add_subcommand(
      "doctor", "check this host and every server (--servers / SMB_SERVERS, optional) for what the fabric needs: "
                "memlock, open files, huge pages, RDMA devices, ports, GIDs and MTU, UCX's transports, each "
                "server's control port, hello, data path and clock; each problem with the command that fixes it");
  smb::smbctl::DoctorOptions doctoring;
  double doctor_timeout_s = 5;
  doctor->add_option("--capacity", doctoring.capacity,
                     "memory an smbd on this host would lend (pinned for RDMA), e.g. 4G: checked against memlock "
                     "and huge pages")
      ->transform(CLI::AsSizeValue(false));
  doctor->add_option("--transport", doctoring.transport,
                     std::string("the transport to check (") + SMB_TRANSPORTS +
                         "; default: $SMB_TRANSPORT, else every one built)");
  doctor->add_option("--timeout", doctor_timeout_s, "seconds each stage of a server's probe may take (default 5)")
      ->check(CLI::Range(0.1, 600.0));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help: 0; any usage error: 2
  }

  smb::tools::init_logging(verbose);
  if (credential_create->parsed()) {
    if (secret_file.empty())
      if (const char* env = std::getenv("SMB_AUTH_TOKEN_FILE")) secret_file = env;
    try {
      smb::smbctl::create_credential(secret_file, prefix, std::chrono::seconds(lifetime_s), out_path, json);
      return 0;
    } catch (const smb::Error& e) {
      std::cerr << "smbctl: " << e.what() << '\n';
      return e.code() == smb::Errc::invalid_argument ? 2 : 1;
    }
  }
  std::optional<std::string> servers_flag;
  if (servers_opt->count() > 0) servers_flag = servers_text;
  if (doctor->parsed()) {  // servers optional: this host alone without them
    try {
      const char* listed = std::getenv("SMB_SERVERS");
      if (servers_flag || (listed != nullptr && *listed != '\0'))
        doctoring.servers = servers_flag ? smb::tools::client_options(servers_flag).servers
                                         : smb::parse_server_list(listed);
      const char* transport = std::getenv("SMB_TRANSPORT");
      if (doctoring.transport.empty() && transport != nullptr) doctoring.transport = transport;
      if (const char* token = std::getenv("SMB_AUTH_TOKEN_FILE")) doctoring.auth_token_file = token;
      doctoring.timeout = std::chrono::milliseconds(static_cast<long>(doctor_timeout_s * 1000));
      return smb::smbctl::run_doctor(doctoring, json) ? 3 : 0;
    } catch (const smb::Error& e) {
      std::cerr << "smbctl: " << e.what() << '\n';
      return e.code() == smb::Errc::invalid_argument ? 2 : 1;
    }
  }
  smb::ClientOptions options;
  try {
    options = smb::tools::client_options(servers_flag);
    options.tolerate_unreachable = true;  // an operator must see the servers that are there
  } catch (const smb::Error& e) {
    std::cerr << "smbctl: " << e.what() << '\n';
    return 2;
  }

  bool degraded = false;
  try {
    const auto every = std::chrono::milliseconds(static_cast<long>(refresh_s * 1000));
    if (status->parsed() && (status_watch || iterations)) {
      smb::smbctl::watch_status(options, json, every, iterations);
      return 0;
    }
    if (top->parsed()) {
      smb::smbctl::show_top(options, json, every, iterations);
      return 0;
    }
    replacing.after = std::chrono::milliseconds(static_cast<long>(replace_after * 1000));
    if (!watch && replacing.spares.size() > 1) {
      std::cerr << "smbctl: repair --onto takes one server without --watch (a list is --watch's spares)\n";
      return 2;
    }
    if (!replacing.lost.empty() && replacing.spares.empty()) {
      std::cerr << "smbctl: repair --replace needs --onto (the server that takes its place)\n";
      return 2;
    }
    if (repair->parsed() && watch)
      smb::smbctl::watch_repairs(options, name, json, std::chrono::milliseconds(static_cast<long>(interval * 1000)),
                                 replacing);
    smb::Client client(std::move(options));
    if (status->parsed()) degraded = smb::smbctl::show_status(client, json);
    if (ls->parsed()) degraded = smb::smbctl::list_buffers(client, json);
    if (info->parsed()) degraded = smb::smbctl::show_info(client, name, json);
    if (rm->parsed()) smb::smbctl::remove_buffer(client, name, json);
    if (save->parsed()) smb::smbctl::save_buffer(client, name, file, json);
    if (load->parsed()) smb::smbctl::load_buffer(client, file, name, json);
    if (repair->parsed()) degraded = smb::smbctl::repair_buffers(client, name, json, replacing);
    if (dump->parsed()) smb::smbctl::dump_elements(client, name, *smb::parse_dtype(dtype), offset, count, json);
  } catch (const std::exception& e) {
    std::cerr << "smbctl: " << e.what() << '\n';
    return 1;
  }
  return degraded ? 3 : 0;
}
