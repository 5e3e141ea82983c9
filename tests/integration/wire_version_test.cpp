// Peers of different releases fail at hello, with one error naming both
// wire versions and the side to upgrade (protocol/messages.hpp, kVersion),
// never mid-session: a real smbd answering hellos of an older and a newer
// client, and a real client meeting a server of a newer release (a stand-in
// on a plain socket that answers as such a server would).
#include "raw_connection.hpp"
#include "smbd_process.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

namespace {

using namespace smb::test;
using namespace std::chrono_literals;
using json = nlohmann::json;

constexpr std::uint16_t kHello = type_of(MessageType::hello);
constexpr std::uint16_t kOurs = RawHeader{}.version;  // the version this suite speaks
const std::string kOursText = std::to_string(kOurs);
constexpr int kProtocol = 9;

RawBytes hello_in(std::uint16_t version) {
  const auto body = json::to_msgpack(json{{"client", "another-release"}, {"transport", "ucx"}});
  RawHeader h;
  h.version = version;
  h.type = kHello;
  h.request_id = 7;
  h.body_length = static_cast<std::uint32_t>(body.size());
  RawBytes frame = encode_raw_header(h);
  frame.insert(frame.end(), body.begin(), body.end());
  return frame;
}

TEST(WireVersionTest, SmbdAnswersAHelloOfAnotherReleaseWithBothVersionsAndCloses) {
  SmbdProcess server;
  for (const auto& [version, upgrade] :
       {std::pair<std::uint16_t, std::string>{static_cast<std::uint16_t>(kOurs - 1), "upgrade the client"},
        std::pair<std::uint16_t, std::string>{static_cast<std::uint16_t>(kOurs + 1), "upgrade smbd"}}) {
    RawConnection raw(server.address());
    ASSERT_TRUE(raw.send(hello_in(version)));
    const auto reply = raw.receive();
    ASSERT_TRUE(reply.has_value()) << "version " << version << ": no reply\n" << server.log();
    EXPECT_EQ(reply->header.version, kOurs) << "the reply is in the server's own version";
    EXPECT_EQ(reply->header.type, kHello | kReplyBit);
    EXPECT_EQ(reply->header.request_id, 7u);
    ASSERT_TRUE(reply->body.is_object());
    EXPECT_FALSE(reply->body.value("ok", true));
    EXPECT_EQ(reply->body.value("errc", 0), kProtocol);
    const std::string error = reply->body.value("error", "");
    EXPECT_NE(error.find("speaks wire version " + std::to_string(version) + " and smbd version " + kOursText),
              std::string::npos)
        << error;
    EXPECT_NE(error.find(upgrade), std::string::npos) << error;
    EXPECT_TRUE(raw.closed_by_peer()) << "the connection should close after the mismatch";
  }
  smb::ClientOptions options;  // and this release's clients are served as before
  options.servers = {server.address()};
  smb::Client client(options);
  EXPECT_EQ(client.status().size(), 1u);
}

// A listening socket on loopback that answers the first frame it reads
// with `reply` (bytes), then closes: a server of another release.
class ForeignServer {
 public:
  explicit ForeignServer(RawBytes reply) : reply_(std::move(reply)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd_, 4) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &length) != 0)
      throw std::runtime_error("ForeignServer: cannot listen on loopback");
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~ForeignServer() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  ForeignServer(const ForeignServer&) = delete;
  ForeignServer& operator=(const ForeignServer&) = delete;

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  void serve() {
    const int client = ::accept(fd_, nullptr, nullptr);
    if (client < 0) return;
    std::uint8_t head[16];
    if (::recv(client, head, sizeof head, MSG_WAITALL) == sizeof head) {
      const std::uint32_t length = head[12] | head[13] << 8 | head[14] << 16 | static_cast<std::uint32_t>(head[15]) << 24;
      std::vector<std::uint8_t> body(length);
      if (length == 0 || ::recv(client, body.data(), length, MSG_WAITALL) == static_cast<ssize_t>(length))
        (void)::send(client, reply_.data(), reply_.size(), MSG_NOSIGNAL);
    }
    ::close(client);
  }

  RawBytes reply_;
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

RawBytes reply_in(std::uint16_t version, const json& body) {
  const auto bytes = json::to_msgpack(body);
  RawHeader h;
  h.version = version;
  h.type = kHello | kReplyBit;
  h.request_id = 0;  // whatever the client's id: a version mismatch is reported before the id is checked
  h.body_length = static_cast<std::uint32_t>(bytes.size());
  RawBytes frame = encode_raw_header(h);
  frame.insert(frame.end(), bytes.begin(), bytes.end());
  return frame;
}

std::string connect_error(const std::string& address) {
  smb::ClientOptions options;
  options.servers = {address};
  options.timeout = 5s;
  try {
    smb::Client client(options);
  } catch (const smb::Error& e) {
    return e.what();
  }
  return "";
}

TEST(WireVersionTest, AClientMeetingANewerServerSaysBothVersionsAtConnect) {
  // A newer server's own words come through ...
  const std::string newer_words = "wire version " + kOursText + " and smbd version " + std::to_string(kOurs + 1) +
                                  ": upgrade the client";
  ForeignServer newer(reply_in(static_cast<std::uint16_t>(kOurs + 1), {{"ok", false}, {"errc", kProtocol},
                                           {"error", "the client (libsmb) speaks " + newer_words + " (a newer smbd)"}}));
  auto error = connect_error(newer.address());
  EXPECT_NE(error.find(newer.address()), std::string::npos) << error;
  EXPECT_NE(error.find(newer_words + " (a newer smbd)"), std::string::npos) << error;
  // ... and a reply in another version that is no error is reported alike.
  ForeignServer odd(reply_in(static_cast<std::uint16_t>(kOurs + 3), {{"ok", true}}));
  error = connect_error(odd.address());
  EXPECT_NE(error.find("speaks wire version " + kOursText + " and smbd version " + std::to_string(kOurs + 3) +
                       ": upgrade the client"),
            std::string::npos)
      << error;
}

}  // namespace
