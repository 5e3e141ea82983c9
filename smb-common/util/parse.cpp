#include "util/parse.hpp"

#include <smb/client.hpp>
#include <smb/error.hpp>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstdio>
#include <limits>

namespace smb {

const char* errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::ok: return "ok";
    case Errc::invalid_argument: return "invalid argument";
    case Errc::out_of_range: return "out of range";
    case Errc::not_found: return "not found";
    case Errc::already_exists: return "already exists";
    case Errc::no_space: return "no space";
    case Errc::unreachable: return "unreachable";
    case Errc::server_gone: return "server gone";
    case Errc::timeout: return "timeout";
    case Errc::protocol: return "protocol error";
    case Errc::transport: return "transport error";
    case Errc::internal: return "internal error";
    case Errc::data_lost: return "data lost";
    case Errc::permission_denied: return "permission denied";
    case Errc::busy: return "busy";
    case Errc::out_of_order: return "out of order";
  }
  return "unknown error";
}

const char* share_state_name(ShareState state) noexcept {
  switch (state) {
    case ShareState::ok: return "ok";
    case ShareState::unreachable: return "unreachable";
    case ShareState::restarted: return "restarted (share lost)";
  }
  return "unknown";
}

std::uint64_t parse_size(std::string_view text) {
  const std::string original(text);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  std::uint64_t shift = 0;
  if (!text.empty()) {
    char unit = text.back();
    if (unit == 'B' || unit == 'b') {  // accept "128MB"/"128MiB" style too
      text.remove_suffix(1);
      if (!text.empty() && (text.back() == 'i' || text.back() == 'I')) text.remove_suffix(1);
      unit = text.empty() ? '0' : text.back();
    }
    switch (unit) {
      case 'k': case 'K': shift = 10; break;
      case 'm': case 'M': shift = 20; break;
      case 'g': case 'G': shift = 30; break;
      case 't': case 'T': shift = 40; break;
      default: break;
    }
    if (shift != 0) text.remove_suffix(1);
  }
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    throw Error(Errc::invalid_argument,
                "invalid size '" + original + "': expected a number with an optional K, M, G or T suffix");
  if (shift != 0 && value > (std::numeric_limits<std::uint64_t>::max() >> shift))
    throw Error(Errc::invalid_argument, "size '" + original + "' is too large");
  return value << shift;
}

// Commas separate, as documented; semicolons and white space too, since
// lists get typed that way (a ';' used to end up inside a host name).
std::vector<std::string> parse_server_list(std::string_view text) {
  constexpr std::string_view kSeparators = ",; \t\n";
  std::vector<std::string> out;
  while (!text.empty()) {
    const auto end = text.find_first_of(kSeparators);
    const auto item = text.substr(0, end);
    if (!item.empty()) out.push_back(util::parse_host_port(item).str());
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return out;
}

}  // namespace smb

namespace smb::util {

HostPort parse_host_port(std::string_view text, bool allow_zero_port) {
  constexpr std::size_t kMaxHost = 253;  // the longest DNS name
  const auto shown = [&] { return util::quoted(text); };
  auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size() || colon > kMaxHost + 2)
    throw Error(Errc::invalid_argument, "invalid address " + shown() + ": expected HOST:PORT, e.g. 127.0.0.1:7000");
  HostPort hp;
  hp.host = std::string(text.substr(0, colon));
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']')
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  const bool printable = std::all_of(hp.host.begin(), hp.host.end(), [](char c) {
    return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7f;
  });
  if (hp.host.empty() || hp.host.size() > kMaxHost || !printable)
    throw Error(Errc::invalid_argument, "invalid host in address " + shown() +
                                            ": expected a name or IP address of 1 to 253 printable characters");
  auto port_text = text.substr(colon + 1);
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535 ||
      (port == 0 && !allow_zero_port))
    throw Error(Errc::invalid_argument,
                "invalid port in address " + shown() + ": expected 1-65535");
  hp.port = static_cast<std::uint16_t>(port);
  return hp;
}

std::string quoted(std::string_view text) {
  constexpr std::size_t kMaxQuoted = 64;
  std::string out = "'";
  for (char c : text.substr(0, kMaxQuoted)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f && c != '\\') {
      out += c;
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      out += escaped;
    }
  }
  out += '\'';
  if (text.size() > kMaxQuoted) out += "...(" + std::to_string(text.size()) + " bytes)";
  return out;
}

std::string format_bytes(std::uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::chrono::milliseconds connect_timeout() {
  constexpr std::chrono::milliseconds kDefault{5000};
  const char* text = std::getenv("SMB_CONNECT_TIMEOUT");
  if (text == nullptr || *text == '\0') return kDefault;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(seconds >= 0.01 && seconds <= 3600))
    throw Error(Errc::invalid_argument, std::string("SMB_CONNECT_TIMEOUT='") + text +
                                            "': expected seconds from 0.01 to 3600 (default 5)");
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
}

}  // namespace smb::util
