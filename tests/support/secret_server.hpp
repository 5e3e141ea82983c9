#pragma once
// A test with one real smbd that wants a shared secret (--auth-token-file),
// and a private temporary folder for secret and credential files: the
// authentication and per-job credential tests.
#include "scoped_env.hpp"
#include "smbd_process.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

namespace smb::test {

class SecretServerTest : public testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/smb-secret-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    secret_ = write("secret", "correct horse battery staple\n");
    env_.unset("SMB_AUTH_TOKEN_FILE");
    SmbdOptions options;
    options.extra_args = {"--auth-token-file", secret_};
    server_ = std::make_unique<SmbdProcess>(options);
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // `text` in a file of the folder, with `mode`; returns its path.
  std::string write(const std::string& name, const std::string& text, mode_t mode = 0600) {
    const auto path = dir_ + "/" + name;
    std::ofstream(path) << text;
    ::chmod(path.c_str(), mode);
    return path;
  }

  // A client of the server proving `auth_file` (a secret or a credential; empty: none).
  smb::Client client(const std::string& auth_file) const {
    smb::ClientOptions options;
    options.servers = {server_->address()};
    options.timeout = std::chrono::seconds(5);
    options.auth_token_file = auth_file;
    return smb::Client(options);
  }

  std::string dir_, secret_;  // secret_: the server's --auth-token-file
  ScopedEnv env_;
  std::unique_ptr<SmbdProcess> server_;
};

}  // namespace smb::test
