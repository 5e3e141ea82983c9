#include "host/findings_codec.hpp"

#include <array>

namespace smb::host {

namespace {

constexpr std::size_t kMaxFindings = 1024;
constexpr std::size_t kMaxText = 4096;
constexpr std::array kLevels{HostFinding::Level::ok, HostFinding::Level::note, HostFinding::Level::warn,
                             HostFinding::Level::fail};

std::string text(const protocol::Body& item, const char* field, const char* what) {
  const auto it = item.find(field);
  if (it == item.end() || !it->is_string() || it->get_ref<const std::string&>().size() > kMaxText)
    throw Error(Errc::protocol, std::string(what) + ": a finding's '" + field + "' must be a string of at most " +
                                    std::to_string(kMaxText) + " bytes");
  return it->get<std::string>();
}

}  // namespace

protocol::Body findings_to_body(const std::vector<HostFinding>& findings) {
  auto out = protocol::Body::array();
  for (const auto& f : findings)
    out.push_back({{"level", host_level_name(f.level)}, {"check", f.check}, {"detail", f.detail}, {"fix", f.fix}});
  return out;
}

std::vector<HostFinding> findings_from_body(const protocol::Body& body, const char* what) {
  if (!body.is_array() || body.size() > kMaxFindings)
    throw Error(Errc::protocol, std::string(what) + ": 'checks' must be an array of at most " +
                                    std::to_string(kMaxFindings) + " findings");
  std::vector<HostFinding> out;
  for (const auto& item : body) {
    if (!item.is_object()) throw Error(Errc::protocol, std::string(what) + ": a finding must be an object");
    HostFinding f{HostFinding::Level::ok, text(item, "check", what), text(item, "detail", what),
                  text(item, "fix", what)};
    const auto level = text(item, "level", what);
    bool known = false;
    for (const auto l : kLevels)
      if (level == host_level_name(l)) f.level = l, known = true;
    if (!known) throw Error(Errc::protocol, std::string(what) + ": unknown finding level '" + level + "'");
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace smb::host
