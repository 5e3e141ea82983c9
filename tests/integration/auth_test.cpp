// Shared-secret authentication (smbd --auth-token-file, SMB_AUTH_TOKEN_FILE):
// a client with no or a wrong secret is refused at connect with
// permission_denied and learns no buffer names, transport address or remote
// keys; one with the right secret is served as usual, through the API and
// through the tools.
#include "expect_error.hpp"
#include "fabric.hpp"
#include "process.hpp"
#include "raw_connection.hpp"
#include "scoped_env.hpp"
#include "secret_server.hpp"
#include "smbd_process.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

namespace {

using namespace smb::test;
using namespace std::chrono_literals;
using json = nlohmann::json;

constexpr int kProtocol = 9;
constexpr int kPermissionDenied = 13;
constexpr std::uint16_t kHello = type_of(MessageType::hello), kListLayouts = type_of(MessageType::list_layouts),
                        kOpenSegment = type_of(MessageType::open_segment), kAuth = type_of(MessageType::auth);

// right_: the server's secret; wrong_: one letter more.
class AuthTest : public SecretServerTest {
 protected:
  void SetUp() override {
    SecretServerTest::SetUp();
    right_ = secret_;
    wrong_ = write("wrong", "correct horse battery stapler\n");
  }
  std::string right_, wrong_;
};

TEST_F(AuthTest, TheRightSecretIsServedAsUsual) {
  auto c = client(right_);
  auto buffer = c.create("secret-model", 1 << 20);
  std::vector<float> ones(1024, 1.0f);
  buffer.write(0, std::as_bytes(std::span(ones)));
  buffer.apply(smb::VectorOp::accumulate, smb::DType::f32, 0, ones.size(), 1.0, std::as_bytes(std::span(ones)));
  std::vector<float> got(ones.size());
  buffer.read(0, std::as_writable_bytes(std::span(got)));
  EXPECT_EQ(got, std::vector<float>(ones.size(), 2.0f));
  EXPECT_EQ(buffer.fetch_add(8192, 5), 0u);
  auto names = c.list();
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0].name, "secret-model");

  // The same through SMB_AUTH_TOKEN_FILE, as the tools, C and Python get it.
  env_.set("SMB_AUTH_TOKEN_FILE", right_);
  auto from_env = client("");
  EXPECT_EQ(from_env.open("secret-model").fetch_add(8192, 1), 5u);
}

TEST_F(AuthTest, NoOrAWrongSecretIsDeniedAtConnect) {
  client(right_).create("secret-model", 4096);
  const auto none = expect_errc(smb::Errc::permission_denied, [&] { client(""); }, "connect without a secret");
  EXPECT_TRUE(mentions(none, "SMB_AUTH_TOKEN_FILE"));
  EXPECT_TRUE(mentions(none, server_->address()));
  const auto wrong = expect_errc(smb::Errc::permission_denied, [&] { client(wrong_); }, "connect with a wrong secret");
  EXPECT_TRUE(mentions(wrong, "authentication failed"));
  expect_errc(smb::Errc::invalid_argument, [&] { client(dir_ + "/missing"); }, "a secret file that is not there");
  // Denied clients changed nothing: the buffer is still there for the right one.
  EXPECT_EQ(client(right_).open("secret-model").size(), 4096u);
  EXPECT_TRUE(server_->running());
}

// Below the API: before a proof, a session gets a challenge and nothing else,
// and any request (listing, opening a segment for its remote key) ends it.
TEST_F(AuthTest, UnprovenSessionsLearnNothing) {
  client(right_).create("secret-model", 4096);
  for (const std::uint16_t type : {kListLayouts, kOpenSegment}) {
    RawConnection raw(server_->address());
    raw.send(msgpack_frame(kHello, 1, {{"client", "test"}, {"transport", "ucx"}}));
    auto challenge = raw.receive();
    ASSERT_TRUE(challenge);
    EXPECT_EQ(challenge->body.value("auth", ""), "hmac-sha256") << challenge->body.dump();
    EXPECT_FALSE(challenge->body.contains("address")) << "the transport address before a proof";
    EXPECT_FALSE(challenge->body.contains("session")) << challenge->body.dump();
    raw.send(msgpack_frame(type, 2, {{"name", "secret-model"}}));
    auto reply = raw.receive();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->body.value("errc", 0), kPermissionDenied) << reply->body.dump();
    EXPECT_EQ(reply->body.dump().find("secret-model"), std::string::npos) << reply->body.dump();
    EXPECT_TRUE(raw.closed_by_peer());
  }
  {  // A made-up proof.
    RawConnection raw(server_->address());
    raw.send(msgpack_frame(kHello, 1, {{"client", "test"}, {"transport", "ucx"}}));
    ASSERT_TRUE(raw.receive());
    raw.send(msgpack_frame(kAuth, 2, {{"proof", json::binary(std::vector<std::uint8_t>(32, 0x5a))}}));
    auto reply = raw.receive();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->body.value("errc", 0), kPermissionDenied) << reply->body.dump();
    EXPECT_FALSE(reply->body.contains("address"));
    EXPECT_TRUE(raw.closed_by_peer());
  }
  {  // An auth with no hello before it.
    RawConnection raw(server_->address());
    raw.send(msgpack_frame(kAuth, 1, {{"proof", json::binary(std::vector<std::uint8_t>(32, 0))}}));
    auto reply = raw.receive();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->body.value("errc", 0), kProtocol) << reply->body.dump();
  }
  EXPECT_EQ(client(right_).list().size(), 1u);
}

TEST_F(AuthTest, ToolsTakeTheSecretFromTheEnvironment) {
  client(right_).create("secret-model", 4096);
  const auto denied = run_tool(smbctl_path(), {"--servers", server_->address(), "ls"});
  EXPECT_NE(denied.status.code, 0) << denied.describe();
  EXPECT_NE(denied.err.find("SMB_AUTH_TOKEN_FILE"), std::string::npos) << denied.describe();
  EXPECT_EQ(denied.out.find("secret-model"), std::string::npos) << denied.describe();
  env_.set("SMB_AUTH_TOKEN_FILE", right_);
  const auto listed = run_tool(smbctl_path(), {"--servers", server_->address(), "ls"});
  EXPECT_EQ(listed.status.code, 0) << listed.describe();
  EXPECT_NE(listed.out.find("secret-model"), std::string::npos) << listed.describe();
}

TEST(AuthWarnings, OpenListenersWithoutASecretAndReadableSecretsAreWarnedOf) {
  SmbdOptions open;
  open.listen = "0.0.0.0:0";
  SmbdProcess exposed(open);
  EXPECT_NE(exposed.log().find("without --auth-token-file"), std::string::npos) << exposed.log();

  SmbdProcess loopback;
  EXPECT_EQ(loopback.log().find("without --auth-token-file"), std::string::npos) << loopback.log();

  char pattern[] = "/tmp/smb-auth-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::string path = std::string(pattern) + "/readable";
  std::ofstream(path) << "s3cret\n";
  ::chmod(path.c_str(), 0644);
  SmbdOptions readable;
  readable.extra_args = {"--auth-token-file", path};
  SmbdProcess shared(readable);
  EXPECT_NE(shared.log().find("can be read by other users"), std::string::npos) << shared.log();
  std::filesystem::remove_all(pattern);
}

}  // namespace
