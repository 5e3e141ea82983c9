// smbctl credential create: a per-job credential (smb::make_credential),
// derived here from the servers' shared secret. No server is asked: each
// derives the key again from its own secret when the credential is shown.
#include "commands.hpp"

#include <smb/error.hpp>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>

namespace smb::smbctl {
namespace {

std::string utc(std::uint64_t unix_seconds) {
  const auto t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// Written whole, readable by its owner only: a credential opens its prefix's buffers.
void write_private(const std::string& path, const std::string& text) {
  const auto partial = path + ".partial";
  const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw Error(Errc::invalid_argument, "credential: cannot write " + partial + ": " + std::strerror(errno));
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int saved = errno;
  ::close(fd);
  if (!written || std::rename(partial.c_str(), path.c_str()) != 0) {
    std::filesystem::remove(partial);
    throw Error(Errc::invalid_argument, "credential: cannot write " + path + ": " + std::strerror(written ? errno : saved));
  }
}

}  // namespace

void create_credential(const std::string& secret_file, const std::string& prefix, std::chrono::seconds lifetime,
                       const std::string& out_path, bool json) {
  const auto text = make_credential(secret_file, prefix, lifetime);
  if (out_path.empty()) {
    std::cout << text;  // the credential itself is the output
    return;
  }
  write_private(out_path, text);
  const auto expires = nlohmann::json::parse(text).at("expires").get<std::uint64_t>();
  if (json) {
    std::cout << nlohmann::json{{"file", out_path}, {"prefix", prefix}, {"expires", expires}, {"expires_utc", utc(expires)}}
                     .dump(2)
              << '\n';
  } else {
    std::cout << "credential for names starting '" << prefix << "' until " << utc(expires) << " written to "
              << out_path << "\n(give it to the job as SMB_AUTH_TOKEN_FILE=" << out_path << ")\n";
  }
}

}  // namespace smb::smbctl
