#pragma once
// smbctl's subcommands. Each prints a human table, or one JSON document when
// json is set, on stdout; smb::Error propagates to main. status, ls and info
// return true when the fabric is degraded (a server unreachable, a buffer's
// share lost), which main turns into exit status 3.
#include <smb/client.hpp>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <ostream>
#include <optional>
#include <string>

namespace smb::smbctl {

// smbctl status; `compact`: JSON on one line (--watch prints one per refresh).
bool show_status(Client& client, bool json, std::ostream& out = std::cout, bool compact = false);
// smbctl status --watch, smbctl top: refreshed every `every` until killed, or
// `iterations` times (watch.cpp).
void watch_status(const ClientOptions& options, bool json, std::chrono::milliseconds every,
                  std::optional<unsigned> iterations);
void show_top(const ClientOptions& options, bool json, std::chrono::milliseconds every,
              std::optional<unsigned> iterations);
bool list_buffers(Client& client, bool json);             // smbctl ls
bool show_info(Client& client, const std::string& name, bool json);      // smbctl info NAME
void remove_buffer(Client& client, const std::string& name, bool json);  // smbctl rm NAME
// smbctl save NAME FILE / smbctl load FILE [NAME]: checkpoints.
void save_buffer(Client& client, const std::string& name, const std::string& path, bool json);
void load_buffer(Client& client, const std::string& path, const std::string& name, bool json);
// smbctl dump NAME --dtype T [--offset ELEMS] [--count N]: one element per line.
void dump_elements(Client& client, const std::string& name, DType type, std::uint64_t offset,
                   std::optional<std::uint64_t> count, bool json);

// smbctl repair --onto SPARE[,SPARE...] [--replace LOST] [--replace-after S]:
// lost servers replaced by new ones at other addresses before the repair.
struct Replacing {
  std::vector<std::string> spares;     // unused smbd, in the order to take them
  std::string lost;                    // the server to replace (default: the one unreachable)
  std::chrono::milliseconds after{0};  // --watch: how long a server stays unreachable first
};
// smbctl repair [NAME]: one pass; true when some buffer stays degraded.
bool repair_buffers(Client& client, const std::string& name, bool json, const Replacing& replacing);
// smbctl repair --watch: a pass every `every` with a fresh client, until killed;
// prints what it repaired and each lasting state (busy, lost) once.
[[noreturn]] void watch_repairs(const ClientOptions& options, const std::string& name, bool json,
                                std::chrono::milliseconds every, Replacing replacing);

// smbctl credential create --prefix P [--expires D] [--out FILE]: a per-job
// credential derived from the shared secret in `secret_file` (no server asked).
void create_credential(const std::string& secret_file, const std::string& prefix, std::chrono::seconds lifetime,
                       const std::string& out_path, bool json);

// smbctl doctor: this host's checks, then each server's stages (control
// port, hello, its host's checks and clock, the data path); true when
// something blocks.
struct DoctorOptions {
  std::vector<std::string> servers;  // none: this host only
  std::string transport;             // empty: every transport this build has (the client: SMB_TRANSPORT or ucx)
  std::uint64_t capacity = 0;        // the bytes an smbd here would pin (--capacity); 0: unknown
  std::chrono::milliseconds timeout{5000};  // per stage
  std::string auth_token_file;
};
bool run_doctor(const DoctorOptions& options, bool json);

// "ok", "degraded: 1 of 3 servers unreachable", "lost: 127.0.0.1:7001 restarted"
std::string buffer_state(const Layout& layout, const std::vector<ShareState>& states);
// The servers found unreachable, as JSON ({address, error}) and as a note for tables.
void print_unreachable(const std::map<std::string, std::string>& unreachable, std::ostream& out);

}  // namespace smb::smbctl
