// smbctl save and load: a buffer to a checkpoint file and back
// (Client::save / Client::load; the format is in docs/reliability.md).
#include "commands.hpp"

#include <util/parse.hpp>

#include <nlohmann/json.hpp>

#include <iostream>

namespace smb::smbctl {
namespace {

nlohmann::json to_json(const CheckpointInfo& info, const std::string& path) {
  return {{"file", path},       {"name", info.name},       {"size", info.size},
          {"stripe_unit", info.stripe_unit}, {"version", info.version}, {"checksum", info.checksum}};
}

}  // namespace

void save_buffer(Client& client, const std::string& name, const std::string& path, bool json) {
  const auto info = client.save(name, path);
  if (json) {
    std::cout << to_json(info, path).dump(2) << '\n';
    return;
  }
  std::cout << "saved buffer '" << name << "' (" << util::format_bytes(info.size) << ", version " << info.version
            << ") to " << path << '\n';
}

void load_buffer(Client& client, const std::string& path, const std::string& name, bool json) {
  Buffer buffer;
  try {
    buffer = client.load(path, name);  // verifies the file whole first
  } catch (const Error& e) {
    if (e.code() != Errc::already_exists) throw;
    throw Error(e.code(), std::string(e.what()) + ": load it under another name (smbctl load " + path +
                              " NEW_NAME), or remove that buffer first (smbctl rm NAME)");
  }
  const auto& layout = buffer.layout();
  if (json) {
    std::cout << nlohmann::json{{"file", path},
                                {"loaded_as", buffer.name()},
                                {"size", layout.size},
                                {"stripe_unit", layout.stripe_unit},
                                {"servers", layout.servers}}
                     .dump(2)
              << '\n';
    return;
  }
  std::cout << "loaded " << path << " (" << util::format_bytes(layout.size) << ") into buffer '" << buffer.name()
            << "' on " << layout.servers.size() << " server(s)\n";
}

}  // namespace smb::smbctl
