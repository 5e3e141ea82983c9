#include "config_file.hpp"

#include <toml++/toml.h>

#include <iterator>
#include <sstream>

namespace smb::server {

namespace {

std::string where(const toml::source_region& source) {
  return "line " + std::to_string(source.begin.line) + ", column " + std::to_string(source.begin.column);
}

// The keys a config file may set: every long flag but the ones that choose
// or check a config file, and --help.
std::vector<std::string> config_keys(const CLI::App& app) {
  std::vector<std::string> keys;
  for (const auto* option : app.get_options()) {
    const auto& names = option->get_lnames();
    if (names.empty() || !option->get_configurable()) continue;
    if (names[0] == "help" || names[0] == "config" || names[0] == "check-config") continue;
    keys.push_back(names[0]);
  }
  return keys;
}

std::string value_text(const std::string& key, const toml::node& node) {
  if (const auto* text = node.as_string()) return text->get();
  if (const auto* integer = node.as_integer()) return std::to_string(integer->get());
  if (const auto* real = node.as_floating_point()) {
    std::ostringstream out;
    out.precision(17);
    out << real->get();
    return out.str();
  }
  if (const auto* flag = node.as_boolean()) return flag->get() ? "true" : "false";
  const char* what = node.is_array() ? "a list" : node.is_table() ? "a table" : "a date or time";
  throw CLI::ConfigError(where(node.source()) + ": '" + key + "' is " + what +
                         "; smbd's options take one value (a string, a number or true/false)");
}

}  // namespace

std::vector<CLI::ConfigItem> TomlConfig::from_config(std::istream& input) const {
  const std::string text{std::istreambuf_iterator<char>(input), std::istreambuf_iterator<char>()};
  toml::table table;
  try {
    table = toml::parse(text);
  } catch (const toml::parse_error& e) {
    throw CLI::ConfigError(where(e.source()) + ": not valid TOML: " + std::string(e.description()));
  }
  const auto keys = config_keys(app_);
  std::vector<CLI::ConfigItem> result;
  for (const auto& [key, node] : table) {
    const std::string name(key.str());
    if (node.is_table())
      throw CLI::ConfigError(where(node.source()) + ": [" + name +
                             "] is a section; smbd's keys are its long flags, at the top level (see deploy/smbd.toml)");
    if (std::find(keys.begin(), keys.end(), name) == keys.end()) {
      std::string known;
      for (const auto& k : keys) known += (known.empty() ? "" : ", ") + k;
      throw CLI::ConfigError(where(key.source()) + ": unknown key '" + name + "' (smbd's keys: " + known + ")");
    }
    CLI::ConfigItem item;
    item.name = name;
    item.inputs.push_back(value_text(name, node));
    result.push_back(std::move(item));
  }
  return result;
}

}  // namespace smb::server
