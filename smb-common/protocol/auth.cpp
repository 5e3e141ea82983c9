#include "protocol/auth.hpp"

#include <smb/error.hpp>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <sstream>

namespace smb::protocol {
namespace {

// Binds a proof to this protocol, so an HMAC the secret made for anything else never passes.
constexpr char kAuthContext[] = "smb control session v1";
constexpr std::size_t kChallengeBytes = 32;
constexpr std::size_t kMaxSecretBytes = 4096;

}  // namespace

std::string read_secret_file(const std::string& path, const std::string& flag, std::string* warning) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(Errc::invalid_argument, flag + " " + path + ": cannot read it: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  std::string secret = text.str();
  const auto first = secret.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) throw Error(Errc::invalid_argument, flag + " " + path + ": the file is empty");
  secret = secret.substr(first, secret.find_last_not_of(" \t\r\n") - first + 1);
  if (secret.size() > kMaxSecretBytes)
    throw Error(Errc::invalid_argument, flag + " " + path + ": longer than " + std::to_string(kMaxSecretBytes) +
                                            " bytes; is it the right file?");
  struct stat st {};
  if (warning != nullptr && ::stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
    *warning = flag + " " + path + " can be read by other users (chmod 600 it)";
  return secret;
}

Bytes make_challenge() {
  Bytes challenge(kChallengeBytes);
  if (RAND_bytes(challenge.data(), static_cast<int>(challenge.size())) != 1)
    throw Error(Errc::internal, "authentication: OpenSSL could not make a random challenge");
  return challenge;
}

Bytes digest(std::span<const std::uint8_t> bytes) {
  Bytes out(EVP_MAX_MD_SIZE);
  unsigned int length = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), out.data(), &length, EVP_sha256(), nullptr) != 1)
    throw Error(Errc::internal, "authentication: OpenSSL could not make a SHA-256 digest");
  out.resize(length);
  return out;
}

Bytes hmac_sha256(const std::string& key, std::span<const std::uint8_t> message) {
  Bytes mac(EVP_MAX_MD_SIZE);
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), message.data(), message.size(), mac.data(),
           &length) == nullptr)
    throw Error(Errc::internal, "authentication: OpenSSL could not compute an HMAC");
  mac.resize(length);
  return mac;
}

Bytes auth_proof(const std::string& secret, const Bytes& challenge) {
  Bytes message(std::begin(kAuthContext), std::end(kAuthContext));  // the context and its NUL
  message.insert(message.end(), challenge.begin(), challenge.end());
  return hmac_sha256(secret, message);
}

bool proof_matches(const std::string& secret, const Bytes& challenge, const Bytes& proof) {
  const Bytes expected = auth_proof(secret, challenge);
  return proof.size() == expected.size() && CRYPTO_memcmp(proof.data(), expected.data(), expected.size()) == 0;
}

}  // namespace smb::protocol
