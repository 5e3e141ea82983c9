// Per-job credentials (smb::make_credential, smbctl credential create): a
// client holding one for "job-17/" uses the names starting with it as with
// the shared secret, and gets permission_denied for any other name: at
// create and open, for locks and barriers, for a call sent by hand; it sees
// only its prefix in listings. A forged or expired credential is refused at
// connect, and a session ends when its credential expires.
#include "expect_error.hpp"
#include "fabric.hpp"
#include "process.hpp"
#include "secret_server.hpp"

#include <smb/client.hpp>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

namespace {

using namespace smb::test;
using namespace std::chrono_literals;

class CredentialTest : public SecretServerTest {
 protected:
  std::string credential(const std::string& prefix, std::chrono::seconds lifetime = 1h) {
    return write("credential-" + std::to_string(made_++), smb::make_credential(secret_, prefix, lifetime));
  }
  int made_ = 0;
};

TEST_F(CredentialTest, ACredentialServesItsPrefixAndNothingElse) {
  auto admin = client(secret_);
  auto theirs = admin.create("job-18/weights", 4096);
  const std::uint64_t seven = 7;
  theirs.write(0, std::as_bytes(std::span(&seven, 1)));

  auto job = client(credential("job-17/"));
  auto mine = job.create("job-17/weights", 1 << 20);
  std::vector<float> ones(1024, 1.0f), got(ones.size());
  mine.write(0, std::as_bytes(std::span(ones)));
  mine.apply(smb::VectorOp::accumulate, smb::DType::f32, 0, ones.size(), 1.0, std::as_bytes(std::span(ones)));
  mine.read(0, std::as_writable_bytes(std::span(got)));
  EXPECT_EQ(got, std::vector<float>(ones.size(), 2.0f));
  EXPECT_EQ(mine.fetch_add(8192, 3), 0u);
  job.lock("job-17/weights").unlock();
  job.barrier("job-17/step", 1, 5s);

  const auto create = expect_errc(smb::Errc::permission_denied, [&] { job.create("job-18/mine-now", 4096); },
                                  "create outside the prefix");
  EXPECT_TRUE(mentions(create, "job-17/")) << create;
  expect_errc(smb::Errc::permission_denied, [&] { job.open("job-18/weights"); }, "open outside the prefix");
  expect_errc(smb::Errc::permission_denied, [&] { job.destroy("job-18/weights"); }, "destroy outside the prefix");
  expect_errc(smb::Errc::permission_denied, [&] { job.lock("job-18/weights"); }, "lock outside the prefix");
  expect_errc(smb::Errc::permission_denied, [&] { job.barrier("job-18/step", 1, 5s); }, "barrier outside the prefix");
  const auto listed = job.list();
  ASSERT_EQ(listed.size(), 1u) << "a credential's listing shows its own prefix only";
  EXPECT_EQ(listed[0].name, "job-17/weights");

  // The other job's buffer is as it was, and the secret still sees both.
  std::uint64_t word = 0;
  admin.open("job-18/weights").read(0, std::as_writable_bytes(std::span(&word, 1)));
  EXPECT_EQ(word, 7u);
  EXPECT_EQ(admin.list().size(), 2u);
  EXPECT_TRUE(server_->running());
}

// Below the API: a call sent by hand on the credential's session, naming
// another job's segment, is refused by the server and changes nothing.
TEST_F(CredentialTest, ACallNamingAnotherJobsBufferIsRefused) {
  auto admin = client(secret_);
  auto theirs = admin.create("job-18/weights", 4096);
  std::vector<double> zeros(8, 0.0);
  theirs.write(0, std::as_bytes(std::span(zeros)));
  env_.set("SMB_AUTH_TOKEN_FILE", credential("job-17/"));
  const auto refused =
      run_tool(raw_call_path(), {server_->address(), "ucx", "job-18/weights", "0", "8", "1.5"});
  EXPECT_EQ(refused.status.code, 1) << refused.describe();
  EXPECT_NE(refused.err.find("outside this client's credential"), std::string::npos) << refused.describe();
  std::vector<double> got(8, -1.0);
  theirs.read(0, std::as_writable_bytes(std::span(got)));
  EXPECT_EQ(got, zeros);
  // The same call on its own prefix goes through.
  admin.create("job-17/weights", 4096);
  const auto served =
      run_tool(raw_call_path(), {server_->address(), "ucx", "job-17/weights", "0", "8", "1.5"});
  EXPECT_EQ(served.status.code, 0) << served.describe();
}

TEST_F(CredentialTest, AForgedCredentialIsRefusedAtConnect) {
  auto forged = nlohmann::json::parse(smb::make_credential(secret_, "job-17/", 1h));
  forged["prefix"] = "job-";  // the key was made for job-17/ only
  const auto widened = write("widened", forged.dump());
  const auto e = expect_errc(smb::Errc::permission_denied, [&] { client(widened); }, "a widened prefix");
  EXPECT_TRUE(mentions(e, "credential")) << e;
  forged["prefix"] = "job-17/";
  forged["expires"] = forged["expires"].get<std::uint64_t>() + 3600;  // stretched
  expect_errc(smb::Errc::permission_denied, [&] { client(write("stretched", forged.dump())); }, "a stretched expiry");
  // Another fabric's secret makes keys this one refuses.
  const auto other_secret = write("other-secret", "another fabric\n");
  expect_errc(smb::Errc::permission_denied,
              [&] { client(write("foreign", smb::make_credential(other_secret, "job-17/", 1h))); },
              "a credential from another secret");
  expect_errc(smb::Errc::invalid_argument, [&] { client(write("broken", R"({"smb_credential": 1, "prefix": "x/"})")); },
              "a credential with no key");
  expect_errc(smb::Errc::invalid_argument, [&] { smb::make_credential(secret_, "bad prefix!", 1h); }, "a bad prefix");
  expect_errc(smb::Errc::invalid_argument, [&] { smb::make_credential(credential("job-17/"), "job-17/a/", 1h); },
              "a credential making another");
  EXPECT_TRUE(server_->running());
}

TEST_F(CredentialTest, ACredentialEndsItsSessionWhenItExpires) {
  const auto brief = credential("job-17/", 2s);
  auto job = client(brief);
  auto mine = job.create("job-17/weights", 4096);
  EXPECT_EQ(mine.fetch_add(0, 1), 0u);
  std::this_thread::sleep_for(2500ms);
  EXPECT_THROW(mine.fetch_add(0, 1), smb::Error) << "a session went on past its credential's expiry";
  const auto e = expect_errc(smb::Errc::permission_denied, [&] { client(brief); }, "an expired credential");
  EXPECT_TRUE(mentions(e, "expired")) << e;
  // What it made stays, for the secret's holder.
  EXPECT_EQ(client(secret_).open("job-17/weights").fetch_add(0, 0), 1u);
}

TEST_F(CredentialTest, SmbctlMakesOneFromTheSecret) {
  const auto out = dir_ + "/job-17.json";
  const auto made = run_tool(smbctl_path(), {"credential", "create", "--prefix", "job-17/", "--expires", "2h",
                                             "--auth-token-file", secret_, "--out", out});
  ASSERT_EQ(made.status.code, 0) << made.describe();
  EXPECT_NE(made.out.find("job-17/"), std::string::npos) << made.describe();
  struct stat st {};
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "a credential file readable by others";
  auto job = client(out);
  job.create("job-17/x", 4096);
  expect_errc(smb::Errc::permission_denied, [&] { job.create("job-18/x", 4096); }, "smbctl's credential");
  // From the environment, and with nothing to sign with.
  env_.set("SMB_AUTH_TOKEN_FILE", secret_);
  const auto printed = run_tool(smbctl_path(), {"credential", "create", "--prefix", "job-9/"});
  EXPECT_EQ(printed.status.code, 0) << printed.describe();
  EXPECT_EQ(nlohmann::json::parse(printed.out).value("prefix", ""), "job-9/") << printed.describe();
  env_.unset("SMB_AUTH_TOKEN_FILE");
  const auto none = run_tool(smbctl_path(), {"credential", "create", "--prefix", "job-9/"});
  EXPECT_EQ(none.status.code, 2) << none.describe();
  EXPECT_NE(none.err.find("SMB_AUTH_TOKEN_FILE"), std::string::npos) << none.describe();
}

}  // namespace
