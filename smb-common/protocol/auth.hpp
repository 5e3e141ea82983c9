#pragma once
// Shared-secret authentication of control sessions: a challenge-response,
// so the secret never crosses the wire (docs/reliability.md, "Authentication").
//
//   client -> hello {client, transport, ...}
//   server -> {auth: "hmac-sha256", challenge: 32 random bytes}   (nothing else)
//   client -> auth  {proof: HMAC-SHA256(secret, kAuthContext || challenge)}
//   server -> the hello reply (transport address, session, ...), or
//             permission_denied and the connection closes
//
// A fresh challenge per connection makes a recorded proof useless later.
#include "protocol/messages.hpp"

#include <string>

namespace smb::protocol {

inline constexpr const char* kAuthScheme = "hmac-sha256";

// The secret in `path` (surrounding whitespace dropped). Throws
// Error(invalid_argument) naming `flag` when the file cannot be read or is
// empty; `warning` gets a sentence when others may read the file.
std::string read_secret_file(const std::string& path, const std::string& flag, std::string* warning = nullptr);

Bytes make_challenge();
// HMAC-SHA256 of `message` under `key` (OpenSSL).
Bytes hmac_sha256(const std::string& key, std::span<const std::uint8_t> message);
Bytes auth_proof(const std::string& secret, const Bytes& challenge);
// SHA-256 of `bytes`: a server keeps its channel tickets by digest, so that
// how long a lookup takes says nothing about the tickets themselves.
Bytes digest(std::span<const std::uint8_t> bytes);
// Constant-time comparison with the expected proof.
bool proof_matches(const std::string& secret, const Bytes& challenge, const Bytes& proof);

}  // namespace smb::protocol
