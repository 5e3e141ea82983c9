// A connect that cannot complete fails within SMB_CONNECT_TIMEOUT (5 s by
// default), naming the stage it stopped in, instead of waiting out the
// client's longer reply timeout. The peer here is a real listening socket
// whose accept queue is full: the kernel drops further connection requests,
// as a firewall that drops packets does. (The rdma_cm stages are checked in
// the soft-RoCE VM.)
#include "expect_error.hpp"
#include "scoped_env.hpp"

#include <smb/client.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace {

using namespace smb::test;
using smb::Errc;

// A socket listening on loopback with a backlog of 0, its one place taken:
// connects to it hang (their SYNs are dropped) until their own deadline.
class DroppingPeer {
 public:
  DroppingPeer() {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof a;
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(listener_, 0), 0);
    EXPECT_EQ(::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &length), 0);
    port_ = ntohs(a.sin_port);
    filler_ = ::socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(::connect(filler_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  }
  ~DroppingPeer() {
    ::close(filler_);
    ::close(listener_);
  }
  DroppingPeer(const DroppingPeer&) = delete;
  DroppingPeer& operator=(const DroppingPeer&) = delete;
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int listener_ = -1, filler_ = -1;
  std::uint16_t port_ = 0;
};

smb::ClientOptions options_for(const std::string& server) {
  smb::ClientOptions o;
  o.servers = {server};
  o.timeout = std::chrono::seconds(30);  // the replies' wait: the connect must not take it
  return o;
}

TEST(ConnectStagesTest, APeerThatDropsTheConnectFailsWithinTheConnectTimeoutNamingTheStage) {
  DroppingPeer peer;
  for (const auto& [setting, within_ms] : {std::pair<const char*, long>{nullptr, 5000}, {"1.5", 1500}}) {
    ScopedEnv env;
    if (setting != nullptr) env.set("SMB_CONNECT_TIMEOUT", setting);
    else env.unset("SMB_CONNECT_TIMEOUT");
    const auto started = std::chrono::steady_clock::now();
    const auto message = expect_errc(Errc::timeout, [&] { smb::Client client(options_for(peer.address())); },
                                     "a connect to a peer that drops it");
    const auto took = std::chrono::steady_clock::now() - started;
    EXPECT_TRUE(mentions(message, "server " + peer.address() + ": connect: no answer within " +
                                      std::to_string(within_ms) + " ms"));
    EXPECT_GE(took, std::chrono::milliseconds(within_ms - 100)) << "it gave up before its time";
    EXPECT_LT(took, std::chrono::milliseconds(within_ms + 3000)) << "the connect outlived SMB_CONNECT_TIMEOUT";
  }
}

TEST(ConnectStagesTest, AConnectTimeoutThatIsNotSecondsIsRefusedNamingTheVariable) {
  ScopedEnv env;
  for (const char* bad : {"abc", "0", "-1", "5s", "1e9"}) {
    env.set("SMB_CONNECT_TIMEOUT", bad);
    const auto message = expect_errc(Errc::invalid_argument, [] { smb::Client client(options_for("127.0.0.1:1")); },
                                     std::string("SMB_CONNECT_TIMEOUT=") + bad);
    EXPECT_TRUE(mentions(message, "SMB_CONNECT_TIMEOUT"));
  }
}

}  // namespace
