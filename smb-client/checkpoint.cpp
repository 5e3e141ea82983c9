// Checkpoints: a buffer to a file and back (Client::save, Client::load),
// written against the public API; the file format is checkpoint_file.hpp's.
#include "checkpoint_file.hpp"
#include "client_core.hpp"

#include "util/parse.hpp"

#include <smb/client.hpp>

#include <algorithm>
#include <functional>
#include <thread>
#include <vector>

namespace smb {
namespace {

constexpr std::uint64_t kChunk = 16u << 20;  // bytes moved per read or write
constexpr int kMinSaveTries = 3;
// Parts at different versions count as settled only once they have stayed
// so this long: far longer than one op takes to reach all its servers, even
// on a loaded machine (a test tore a save on 3 servers under load when two
// whole reads in a row were taken as enough).
constexpr auto kApartSettle = std::chrono::milliseconds(250);

// The lock's lease covers the whole read: 30 s, and 1 s more per 64 MiB.
LockOptions save_lock(std::uint64_t size) {
  LockOptions o;
  o.lease = std::chrono::seconds(30) + std::chrono::seconds(size >> 26);
  return o;
}

}  // namespace

CheckpointInfo read_checkpoint(const std::string& path) { return checkpoint::FileReader(path).info(); }

CheckpointInfo read_checkpoint(const std::string& path, std::span<std::byte> out) {
  checkpoint::FileReader in(path);  // verified whole first
  if (in.info().size != out.size())
    throw Error(Errc::invalid_argument, "read checkpoint " + util::quoted(path) + ": it holds " +
                                            std::to_string(in.info().size) + " bytes (buffer '" + in.info().name +
                                            "'), the destination takes " + std::to_string(out.size()));
  in.read(out);
  in.finish();
  return in.info();
}

// Consistent means: no server's part changed during the whole read (each
// server's version the same before and after; a server answers a version
// read only between ops, so an op running through the whole read counts as
// a change), and no op was half-applied (applied on some servers, not yet
// on others) when the read began: every part at the same version, or, where
// parts legitimately differ (ops on sub-ranges), the same versions still
// kApartSettle after they were first read, longer than any op takes to
// reach all its servers.
CheckpointInfo Client::save(std::string_view name_view, const std::string& path) {
  const std::string name(name_view);
  const std::string context = "save buffer '" + name + "' to " + util::quoted(path);
  const auto core = core_->open(name);
  Buffer buffer(core);
  const std::uint64_t size = buffer.size();
  std::vector<std::byte> chunk(static_cast<std::size_t>(std::min(size, kChunk)));
  // Tries until the client's timeout has passed (and at least 3 times).
  const auto deadline = std::chrono::steady_clock::now() + core_->timeout();
  int tries = 0;
  for (; tries < kMinSaveTries || std::chrono::steady_clock::now() < deadline; ++tries) {
    auto held = lock(name, save_lock(size));
    const auto looked = std::chrono::steady_clock::now();
    const auto before = core->server_versions();
    CheckpointInfo info{name, size, buffer.layout().stripe_unit, *std::min_element(before.begin(), before.end()), 0};
    checkpoint::FileWriter out(path, info);  // removes its partial file unless finished
    for (std::uint64_t offset = 0; offset < size; offset += chunk.size()) {
      const auto part = std::span(chunk).first(static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), size - offset)));
      buffer.read(offset, part);
      out.append(part);
    }
    if (core->server_versions() != before) continue;  // vector ops landed meanwhile: read it again
    const bool level = std::adjacent_find(before.begin(), before.end(), std::not_equal_to<>()) == before.end();
    if (!level) {
      // Apart: an op may be half applied. Still holding the lock (a writer
      // that takes it cannot move them meanwhile), see that they stay so.
      std::this_thread::sleep_until(looked + kApartSettle);
      if (core->server_versions() != before) continue;
    }
    try {
      held.unlock();
    } catch (const Error& e) {
      if (e.code() != Errc::not_found) throw;
      continue;  // the lease ran out during the read: someone else may have written
    }
    info.checksum = out.finish();
    return info;
  }
  throw Error(Errc::timeout, context + ": the buffer changed during each of " + std::to_string(tries) +
                                 " reads (vector ops landed while it was read): pause its writers, or have them "
                                 "hold its lock, for a consistent snapshot");
}

Buffer Client::load(const std::string& path, std::string_view name_view, const std::optional<BufferOptions>& options) {
  checkpoint::FileReader in(path);  // verified whole before anything changes
  const auto& info = in.info();
  const std::string name = name_view.empty() ? info.name : std::string(name_view);
  BufferOptions placement;
  if (options) {
    placement = *options;
  } else {
    placement.stripe_unit = info.stripe_unit;
  }
  auto buffer = create(name, info.size, placement);  // a name that is taken: already_exists, nothing changed
  try {
    std::vector<std::byte> chunk(static_cast<std::size_t>(std::min(info.size, kChunk)));
    for (std::uint64_t offset = 0; offset < info.size;) {
      const std::size_t n = in.read(chunk);
      buffer.write(offset, std::span(chunk).first(n));
      offset += n;
    }
    in.finish();
  } catch (const Error& e) {
    buffer.close();
    try {
      destroy(name);  // no half-loaded buffer survives
    } catch (const Error&) {
    }
    throw Error(e.code(), "load " + util::quoted(path) + " into buffer '" + name + "': " + e.what());
  }
  return buffer;
}

}  // namespace smb
