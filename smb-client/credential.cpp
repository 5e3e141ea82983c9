// make_credential (include/smb/client.hpp): a per-job credential's file text,
// derived from the servers' shared secret (protocol/credential.hpp).
#include "protocol/credential.hpp"

#include <smb/client.hpp>
#include <smb/error.hpp>

#include <ctime>

namespace smb {

std::string make_credential(const std::string& secret_file, const std::string& prefix,
                            std::chrono::seconds lifetime) {
  if (secret_file.empty())
    throw Error(Errc::invalid_argument,
                "credential: no shared secret: give the file smbd runs with as --auth-token-file (SMB_AUTH_TOKEN_FILE)");
  if (lifetime.count() <= 0) throw Error(Errc::invalid_argument, "credential: its lifetime must be positive");
  const auto secret = protocol::read_shared_secret(secret_file, "credential: secret file");
  const auto expires = static_cast<std::uint64_t>(std::time(nullptr)) + static_cast<std::uint64_t>(lifetime.count());
  return protocol::credential_json(protocol::make_credential(secret, prefix, expires));
}

}  // namespace smb
