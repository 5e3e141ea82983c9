// smbd's tcp data port survives whatever bytes a client sends it: raw
// sockets, not libsmb, talk to a real daemon (--transport tcp). Each bad
// request gets its error (and the stream goes on where it can be followed,
// else the connection closes); a real client then still moves its bytes.
#include "protocol/messages.hpp"
#include "raw_connection.hpp"
#include "scoped_env.hpp"
#include "smbd_process.hpp"
#include "transport/tcp/tcp_socket.hpp"
#include "transport/tcp/tcp_wire.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>

#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using namespace smb;
using namespace smb::transport::tcp;
using namespace std::chrono_literals;

class TcpHostileTest : public testing::Test {
 protected:
  void SetUp() override {
    test::SmbdOptions options;
    options.extra_args = {"--transport", "tcp"};
    server_ = std::make_unique<test::SmbdProcess>(options);
    session_ = std::make_unique<test::RawConnection>(server_->address());
    session_->send(test::msgpack_frame(static_cast<std::uint16_t>(protocol::MessageType::hello), 1,
                                       {{"client", "tcp-hostile"}, {"transport", "tcp"}}));
    const auto hello = session_->receive();
    ASSERT_TRUE(hello && hello->body.value("ok", false)) << server_->log();
    const auto& address = hello->body["address"].get_binary();
    ASSERT_EQ(address.size(), sizeof(WireAddress));
    WireAddress wire;
    std::memcpy(&wire, address.data(), sizeof wire);
    port_ = wire.port;
    const auto& ticket = hello->body["ticket"].get_binary();
    ticket_.assign(ticket.begin(), ticket.end());
  }

  // A connection to the data port that sent `hello` and `ticket`; the reply status.
  util::UniqueFd dial(const Hello& hello, const std::vector<std::uint8_t>& ticket, Errc* status) {
    auto fd = connect_to("127.0.0.1", port_, 5000ms, "test");
    tune(fd.get(), 5000ms, 5000ms);
    const iovec parts[2] = {{const_cast<Hello*>(&hello), sizeof hello},
                            {const_cast<std::uint8_t*>(ticket.data()), ticket.size()}};
    EXPECT_TRUE(send_all(fd.get(), parts));
    HelloReply reply;
    *status = recv_all(fd.get(), &reply, sizeof reply) ? static_cast<Errc>(reply.status) : Errc::server_gone;
    return fd;
  }
  util::UniqueFd admitted() {
    Hello hello;
    hello.ticket_length = static_cast<std::uint32_t>(ticket_.size());
    Errc status;
    auto fd = dial(hello, ticket_, &status);
    EXPECT_EQ(status, Errc::ok);
    return fd;
  }
  // Sends a request (and `data` after it); the reply's status, or server_gone once the connection closed.
  static Errc request(int fd, const RequestHeader& h, const std::vector<std::uint8_t>& data = {}) {
    const iovec parts[2] = {{const_cast<RequestHeader*>(&h), sizeof h},
                            {const_cast<std::uint8_t*>(data.data()), data.size()}};
    if (!send_all(fd, parts)) return Errc::server_gone;
    ReplyHeader reply;
    if (!recv_all(fd, &reply, sizeof reply)) return Errc::server_gone;
    EXPECT_EQ(reply.token, h.token);
    if (reply.length != 0 && !discard(fd, reply.length)) return Errc::server_gone;
    return static_cast<Errc>(reply.status);
  }
  static bool closed(int fd) {
    char byte;
    return ::recv(fd, &byte, 1, 0) <= 0;
  }

  std::unique_ptr<test::SmbdProcess> server_;
  std::unique_ptr<test::RawConnection> session_;  // keeps ticket_ admitted
  std::uint16_t port_ = 0;
  std::vector<std::uint8_t> ticket_;
};

TEST_F(TcpHostileTest, BadHellosAreRefusedAndClosed) {
  Errc status;
  Hello wrong_magic;
  wrong_magic.magic = 0x12345678;
  auto a = dial(wrong_magic, {}, &status);
  EXPECT_EQ(status, Errc::protocol);
  EXPECT_TRUE(closed(a.get()));

  Hello huge_ticket;
  huge_ticket.ticket_length = 1u << 30;
  auto b = dial(huge_ticket, {}, &status);
  EXPECT_EQ(status, Errc::protocol) << "a ticket longer than any is not read";
  EXPECT_TRUE(closed(b.get()));

  Hello made_up;
  made_up.ticket_length = static_cast<std::uint32_t>(ticket_.size());
  auto c = dial(made_up, std::vector<std::uint8_t>(ticket_.size(), 7), &status);
  EXPECT_EQ(status, Errc::permission_denied);
  EXPECT_TRUE(closed(c.get()));
}

TEST_F(TcpHostileTest, RefusedRequestsKeepTheStreamOrCloseIt) {
  auto fd = admitted();
  RequestHeader put;
  put.kind = static_cast<std::uint32_t>(Kind::put);
  put.token = 1;
  put.segment_id = 999;  // no such segment: its payload is read and dropped
  put.length = 64 * 1024;
  EXPECT_EQ(request(fd.get(), put, std::vector<std::uint8_t>(put.length, 0xab)), Errc::not_found);
  RequestHeader add;
  add.kind = static_cast<std::uint32_t>(Kind::atomic);
  add.atomic_op = 1;
  add.token = 2;
  add.segment_id = 999;
  EXPECT_EQ(request(fd.get(), add), Errc::not_found) << "the stream went on after the dropped payload";
  RequestHeader get = put;
  get.kind = static_cast<std::uint32_t>(Kind::get);
  get.token = 3;
  get.length = ~0ull;
  EXPECT_EQ(request(fd.get(), get), Errc::not_found);

  RequestHeader call;
  call.kind = static_cast<std::uint32_t>(Kind::call);
  call.token = 4;
  call.frame_length = 1u << 31;  // more than any frame: the stream cannot be followed
  EXPECT_EQ(request(fd.get(), call), Errc::protocol);
  EXPECT_TRUE(closed(fd.get()));

  auto other = admitted();
  RequestHeader unknown;
  unknown.kind = 77;
  unknown.token = 5;
  EXPECT_EQ(request(other.get(), unknown), Errc::protocol);
  EXPECT_TRUE(closed(other.get()));

  auto cut = admitted();
  put.segment_id = 1;
  put.length = 1u << 20;
  ASSERT_TRUE(::send(cut.get(), &put, sizeof put, MSG_NOSIGNAL) == sizeof put);
  ASSERT_TRUE(::send(cut.get(), "partial", 7, MSG_NOSIGNAL) == 7);
  cut.reset();  // gone in the middle of a payload
}

TEST_F(TcpHostileTest, AClosedSessionsChannelIsRefusedThenCut) {
  auto fd = admitted();
  RequestHeader add;
  add.kind = static_cast<std::uint32_t>(Kind::atomic);
  add.atomic_op = 1;
  add.token = 1;
  add.segment_id = 999;
  EXPECT_EQ(request(fd.get(), add), Errc::not_found) << "served while its session is open";
  session_.reset();
  Errc after = Errc::ok;
  for (auto until = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < until;) {
    after = request(fd.get(), add);
    if (after != Errc::not_found) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(after == Errc::permission_denied || after == Errc::server_gone) << errc_name(after);
}

// After all of the above, on the same daemon: a real client's bytes.
TEST_F(TcpHostileTest, TheDaemonStillServesARealClient) {
  for (int i = 0; i < 3; ++i) {  // hostile connections first
    auto fd = admitted();
    RequestHeader unknown;
    unknown.kind = 0;
    request(fd.get(), unknown);
  }
  test::ScopedEnv env;
  env.set("SMB_TRANSPORT", "tcp");
  ClientOptions options;
  options.servers = {server_->address()};
  options.timeout = 5000ms;
  Client client(options);
  auto buffer = client.create("after-hostile", 4u << 20);
  std::vector<std::byte> data(4u << 20);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 7 + 3);
  buffer.write(0, data);
  std::vector<std::byte> back(data.size());
  buffer.read(0, back);
  EXPECT_EQ(back, data);
  EXPECT_FALSE(server_->died_unexpectedly()) << server_->log();
}

}  // namespace

namespace {

// --transport-option port=N: the data port a firewall can let through.
TEST(TcpDataPort, AFixedPortIsTheOneClientsAreGiven) {
  std::uint16_t free_port = 0;
  {
    auto probe = smb::transport::tcp::listen_any(0);
    free_port = smb::transport::tcp::local_port(probe.get());
  }
  smb::test::SmbdOptions options;
  options.extra_args = {"--transport", "tcp", "--transport-option", "port=" + std::to_string(free_port)};
  smb::test::SmbdProcess server(options);
  smb::test::RawConnection session(server.address());
  session.send(smb::test::msgpack_frame(static_cast<std::uint16_t>(smb::protocol::MessageType::hello), 1,
                                        {{"client", "port"}, {"transport", "tcp"}}));
  const auto hello = session.receive();
  ASSERT_TRUE(hello && hello->body.value("ok", false)) << server.log();
  const auto& address = hello->body["address"].get_binary();
  ASSERT_EQ(address.size(), sizeof(WireAddress));
  WireAddress wire;
  std::memcpy(&wire, address.data(), sizeof wire);
  EXPECT_EQ(wire.port, free_port);
}

}  // namespace
