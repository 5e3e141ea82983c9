#pragma once
// smbctl's subcommands. Each prints a human table, or one JSON document when
// json is set, on stdout; smb::Error propagates to main.
#include <smb/client.hpp>

#include <string>

namespace smb::smbctl {

void show_status(Client& client, bool json);              // smbctl status
void list_buffers(Client& client, bool json);             // smbctl ls
void show_info(Client& client, const std::string& name, bool json);      // smbctl info NAME
void remove_buffer(Client& client, const std::string& name, bool json);  // smbctl rm NAME

}  // namespace smb::smbctl
