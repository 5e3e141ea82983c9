#pragma once
// smbctl's subcommands. Each prints a human table, or one JSON document when
// json is set, on stdout; smb::Error propagates to main.
#include <smb/client.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace smb::smbctl {

void show_status(Client& client, bool json);              // smbctl status
void list_buffers(Client& client, bool json);             // smbctl ls
void show_info(Client& client, const std::string& name, bool json);      // smbctl info NAME
void remove_buffer(Client& client, const std::string& name, bool json);  // smbctl rm NAME
// smbctl dump NAME --dtype T [--offset ELEMS] [--count N]: one element per line.
void dump_elements(Client& client, const std::string& name, DType type, std::uint64_t offset,
                   std::optional<std::uint64_t> count, bool json);

}  // namespace smb::smbctl
