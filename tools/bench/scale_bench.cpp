// smb-scale-bench: what smbd holds at scale, for docs/reliability.md
// (tools/bench/reliability.sh runs it and samples the daemons around it).
//   --buffers N       create N small buffers with long names, list them
//                     (status and ls, paged), destroy them; times each phase
//   --connections N   open N control connections that say hello and idle,
//                     until stdin closes (the script samples smbd meanwhile)
//   --locks N         take N disjoint range locks on one name from one
//                     connection, wait for a line on stdin, then release
//                     them; times both
// Prints one JSON object per phase on stdout.
#include "protocol/messages.hpp"
#include "util/parse.hpp"

#include <smb/client.hpp>

#include <CLI/CLI.hpp>
#include <boost/asio.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <iostream>
#include <memory>
#include <vector>

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using smb::protocol::Body;
using smb::protocol::MessageType;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// A bare control connection: what a client costs the daemon, without a data channel.
class Control {
 public:
  Control(asio::io_context& io, const std::string& server) : socket_(io) {
    const auto hp = smb::util::parse_host_port(server);
    socket_.connect({asio::ip::make_address(hp.host), hp.port});
    call(MessageType::hello, {{"client", "smb-scale-bench"}, {"transport", "ucx"}});
  }
  Body call(MessageType type, const Body& body) {
    const auto frame = smb::protocol::encode_frame(static_cast<std::uint16_t>(type), ++id_, body);
    asio::write(socket_, asio::buffer(frame));
    std::array<std::uint8_t, smb::protocol::kHeaderSize> head{};
    asio::read(socket_, asio::buffer(head));
    std::vector<std::uint8_t> reply(smb::protocol::decode_header(head).body_length);
    asio::read(socket_, asio::buffer(reply));
    auto decoded = smb::protocol::decode_body(reply);
    smb::protocol::throw_if_error(decoded, smb::protocol::message_name(static_cast<std::uint16_t>(type)));
    return decoded;
  }

 private:
  tcp::socket socket_;
  std::uint32_t id_ = 0;
};

void buffers(smb::Client& client, int count) {
  smb::BufferOptions options;
  options.stripe_unit = 4096;
  auto name = [](int i) {
    std::string n = "scale-" + std::to_string(i) + "-";
    n.resize(150, 'x');
    return n;
  };
  auto start = Clock::now();
  for (int i = 0; i < count; ++i) client.create(name(i), 4096 * client.servers().size(), options);
  const double create = since(start);
  start = Clock::now();
  std::size_t listed = 0;
  for (const auto& s : client.status()) listed += s.buffers.size();
  const double status = since(start);
  start = Clock::now();
  const auto layouts = client.list().size();
  const double list = since(start);
  std::cout << nlohmann::json{{"phase", "buffers-held"}, {"buffers", count}, {"create_s", create},
                              {"status_s", status}, {"status_entries", listed}, {"list_s", list},
                              {"list_entries", layouts}}
            << std::endl;
  std::string line;
  std::getline(std::cin, line);  // the script samples the daemons, then says go on
  start = Clock::now();
  for (int i = 0; i < count; ++i) client.destroy(name(i));
  std::cout << nlohmann::json{{"phase", "buffers-destroyed"}, {"destroy_s", since(start)}} << std::endl;
}

void connections(const std::string& server, int count) {
  asio::io_context io;
  std::vector<std::unique_ptr<Control>> held;
  const auto start = Clock::now();
  for (int i = 0; i < count; ++i) held.push_back(std::make_unique<Control>(io, server));
  std::cout << nlohmann::json{{"phase", "connections-held"}, {"connections", count}, {"connect_s", since(start)}}
            << std::endl;
  std::string line;
  std::getline(std::cin, line);
}

void locks(const std::string& server, int count) {
  asio::io_context io;
  Control control(io, server);
  std::vector<std::uint64_t> tokens;
  auto start = Clock::now();
  for (int i = 0; i < count; ++i)
    tokens.push_back(control
                         .call(MessageType::lock, {{"name", "bench-locks"}, {"offset", std::uint64_t(i) * 64},
                                                   {"length", 64}, {"lease_ms", 3'600'000}, {"timeout_ms", 1000}})
                         .at("token")
                         .get<std::uint64_t>());
  std::cout << nlohmann::json{{"phase", "locks-held"}, {"locks", count}, {"lock_s", since(start)}} << std::endl;
  std::string line;
  std::getline(std::cin, line);  // the script samples the daemon (CPU of the locks alone), then says go on
  start = Clock::now();
  for (auto token : tokens) control.call(MessageType::unlock, {{"name", "bench-locks"}, {"token", token}});
  std::cout << nlohmann::json{{"phase", "locks-released"}, {"unlock_s", since(start)}} << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"What smbd holds at scale: buffers, connections, locks", "smb-scale-bench"};
  std::string servers;
  int buffer_count = 0, connection_count = 0, lock_count = 0;
  app.add_option("--servers,-s", servers, "memory servers (default: $SMB_SERVERS)");
  app.add_option("--buffers", buffer_count, "buffers to create, list and destroy");
  app.add_option("--connections", connection_count, "idle control connections to hold (on the first server)");
  app.add_option("--locks", lock_count, "disjoint range locks to take and release (on the first server)");
  CLI11_PARSE(app, argc, argv);
  try {
    smb::ClientOptions options;
    if (!servers.empty()) options.servers = smb::parse_server_list(servers);
    options.timeout = std::chrono::minutes(2);
    smb::Client client(options);
    if (buffer_count > 0) buffers(client, buffer_count);
    if (connection_count > 0) connections(client.servers().front(), connection_count);
    if (lock_count > 0) locks(client.servers().front(), lock_count);
  } catch (const std::exception& e) {
    std::cerr << "smb-scale-bench: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
