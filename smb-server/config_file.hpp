#pragma once
// smbd's config file (--config, --check-config): TOML read by toml++, a
// real TOML parser, instead of CLI11's lenient reader (which took
// `capacity = [1,2` as a value). Keys are the long flags, at the top level,
// one value each; anything else is an error naming the line, so a typo in
// /etc/smb/smbd.toml stops smbd at start instead of being ignored.
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace smb::server {

class TomlConfig : public CLI::ConfigTOML {
 public:
  // `app` holds smbd's options: a key must name one of them.
  explicit TomlConfig(const CLI::App& app) : app_(app) {}
  // Throws CLI::ConfigError with the line and column of what is wrong.
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;

 private:
  const CLI::App& app_;
};

}  // namespace smb::server
