// smbd's config file (--config FILE: CLI11's TOML/INI reader, keys as the
// long flags) through smbd's own option definitions and value checks
// (smb-server/options.hpp): any file ends in options or in a CLI11 or
// smb::Error that smbd reports, never another exception, a crash or a
// sanitizer report.
#include "fuzz_scratch_file.hpp"
#include "options.hpp"

#include <smb/error.hpp>

#include <span>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& path = smb::fuzz::write_scratch(std::span(data, size));
  CLI::App app{"smbd"};
  smb::server::SmbdOptions options;
  smb::server::add_options(app, options);
  try {
    std::vector<std::string> args{path, "--config"};  // CLI11 takes a vector of arguments last first
    app.parse(args);
    smb::server::check_options(options);
  } catch (const CLI::Error&) {
  } catch (const smb::Error&) {
  }
  return 0;
}
