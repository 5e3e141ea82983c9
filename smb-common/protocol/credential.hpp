#pragma once
// Per-job credentials: a key for one name prefix, derived from the servers'
// shared secret, so that one team's job cannot open, read or overwrite
// another's buffers on a shared fabric (docs/reliability.md, "Per-job
// credentials").
//
//   key = HMAC-SHA256(secret, "smb credential v1" NUL prefix NUL expires)
//
// `smbctl credential create` (and smbrun, once per job) derives it where the
// secret is. A client proves the key as it would the secret (auth_proof) and
// sends the prefix and the expiry beside its proof; the server derives the
// key again from its own secret, so it keeps nothing per credential and a
// changed prefix or expiry fails the proof. The session is then scoped:
// every request, call and server-assisted op naming a buffer outside the
// prefix gets permission_denied, listings show the prefix's names only, and
// the session is closed when the credential expires.
#include "protocol/messages.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace smb::protocol {

struct Credential {
  std::string prefix;        // every name the holder may use starts with it
  std::uint64_t expires = 0;  // unix seconds
  std::string key;           // hex of the HMAC above
};

// Throws Error(invalid_argument) unless `prefix` can start a buffer name.
void validate_prefix(std::string_view prefix);
// The key of a credential for `prefix` until `expires`.
std::string credential_key(const std::string& secret, std::string_view prefix, std::uint64_t expires);
Credential make_credential(const std::string& secret, std::string prefix, std::uint64_t expires);
// A credential file's text (JSON), and back. parse_credential returns
// nullopt for text that is not a credential (a plain shared secret) and
// throws Error(invalid_argument) naming `where` for a credential that is
// malformed.
std::string credential_json(const Credential& credential);
std::optional<Credential> parse_credential(std::string_view text, std::string_view where);

// The servers' shared secret in `path` (read_secret_file), refusing a
// credential there: a server or a tool that signs must have the secret itself.
std::string read_shared_secret(const std::string& path, const std::string& flag, std::string* warning = nullptr);

// Whether a session scoped to `scope` (empty: every name) may use `name`
// (a buffer's, a segment's or a lock's).
inline bool in_scope(std::string_view name, std::string_view scope) {
  return scope.empty() || name.starts_with(scope);
}
// Throws Error(permission_denied) naming `what` when `name` is outside `scope`.
void check_scope(std::string_view name, std::string_view scope, std::string_view what);

// What a client proves itself with, read from SMB_AUTH_TOKEN_FILE: the
// servers' shared secret, or a credential.
struct ClientAuth {
  std::string secret;        // the shared secret, or the credential's key
  std::string prefix;        // a credential's prefix; empty: the secret itself
  std::uint64_t expires = 0;  // a credential's expiry

  bool empty() const { return secret.empty(); }
  // The auth message's body answering `challenge`.
  Body answer(const Bytes& challenge) const;
  // Reads `path` (flag: what names it in errors): a credential file or a secret file.
  static ClientAuth from_file(const std::string& path, const std::string& flag);
};

}  // namespace smb::protocol
