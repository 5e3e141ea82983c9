#include "protocol/credential.hpp"

#include "protocol/auth.hpp"
#include "util/parse.hpp"

#include <smb/error.hpp>

#include <nlohmann/json.hpp>

namespace smb::protocol {
namespace {

// Binds a key to this use, so an HMAC the secret made for anything else
// (a session's proof) is never a credential's key.
constexpr char kCredentialContext[] = "smb credential v1";
constexpr int kCredentialFormat = 1;

std::string hex(const Bytes& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (const auto b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 0xf];
  }
  return out;
}

}  // namespace

void validate_prefix(std::string_view prefix) {
  try {
    validate_name(prefix);
  } catch (const Error& e) {
    throw Error(Errc::invalid_argument, "credential prefix: " + std::string(e.what()));
  }
}

std::string credential_key(const std::string& secret, std::string_view prefix, std::uint64_t expires) {
  std::string message(kCredentialContext, sizeof kCredentialContext);  // with its NUL
  message += prefix;
  message += '\0';
  message += std::to_string(expires);
  return hex(hmac_sha256(secret, std::span(reinterpret_cast<const std::uint8_t*>(message.data()), message.size())));
}

Credential make_credential(const std::string& secret, std::string prefix, std::uint64_t expires) {
  validate_prefix(prefix);
  if (secret.empty()) throw Error(Errc::invalid_argument, "credential: no shared secret to derive it from");
  auto key = credential_key(secret, prefix, expires);
  return {std::move(prefix), expires, std::move(key)};
}

std::string credential_json(const Credential& c) {
  return nlohmann::json{{"smb_credential", kCredentialFormat}, {"prefix", c.prefix}, {"expires", c.expires},
                        {"key", c.key}}
             .dump(2) +
         "\n";
}

std::optional<Credential> parse_credential(std::string_view text, std::string_view where) {
  if (text.empty() || text.front() != '{') return std::nullopt;  // a secret: credentials are JSON objects
  const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("smb_credential")) return std::nullopt;
  const auto bad = [&](const std::string& why) {
    return Error(Errc::invalid_argument, std::string(where) + ": not a usable credential: " + why +
                                             " (make one with: smbctl credential create --prefix P)");
  };
  if (json["smb_credential"] != kCredentialFormat) throw bad("format " + json["smb_credential"].dump() + ", not 1");
  if (!json.contains("prefix") || !json["prefix"].is_string()) throw bad("no prefix");
  if (!json.contains("expires") || !json["expires"].is_number_integer()) throw bad("no expiry");
  if (!json.contains("key") || !json["key"].is_string() || json["key"].get_ref<const std::string&>().size() != 64)
    throw bad("no key of 64 hex digits");
  Credential c{json["prefix"], json["expires"], json["key"]};
  validate_prefix(c.prefix);
  return c;
}

std::string read_shared_secret(const std::string& path, const std::string& flag, std::string* warning) {
  auto secret = read_secret_file(path, flag, warning);
  if (parse_credential(secret, flag + " " + path))
    throw Error(Errc::invalid_argument, flag + " " + path +
                                            " holds a per-job credential, not the servers' shared secret (a "
                                            "credential only opens its own prefix and cannot make another)");
  return secret;
}

void check_scope(std::string_view name, std::string_view scope, std::string_view what) {
  if (in_scope(name, scope)) return;
  throw Error(Errc::permission_denied, std::string(what) + ": " + util::quoted(name) +
                                           " is outside this client's credential, which allows names starting " +
                                           util::quoted(scope) + " only");
}

Body ClientAuth::answer(const Bytes& challenge) const {
  Body body{{"proof", binary(auth_proof(secret, challenge))}};
  if (!prefix.empty()) {
    body["prefix"] = prefix;
    body["expires"] = expires;
  }
  return body;
}

ClientAuth ClientAuth::from_file(const std::string& path, const std::string& flag) {
  const auto text = read_secret_file(path, flag);
  auto credential = parse_credential(text, flag + " " + path);
  if (!credential) return {text, {}, 0};
  return {std::move(credential->key), std::move(credential->prefix), credential->expires};
}

}  // namespace smb::protocol
