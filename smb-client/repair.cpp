// Client::repair: rebuilds the copies of a replicated buffer that a
// restarted server lost, and those recorded stale (Layout::stale: behind the
// others on a live server, rebuilt where they are), each from a copy that is
// neither, and records the server's new run in the layout and the stale
// copies as fresh again (docs/reliability.md, "Repair").
//
// Clients that have the buffer open keep writing the copies they know of
// (not the new one) while it is copied, so the copy runs in passes, as a
// live migration does: the whole copy first, then, comparing the two copies'
// digests (computed by their servers), the chunks that changed meanwhile,
// until few change; then the repair pauses every client that holds the
// buffer (repair_pauses.hpp, repair_watch.cpp), recopies what still
// differs, gives the copy its source's version, and ends by recording the
// server's new run, which the paused clients adopt as they go on.
#include "client_core.hpp"
#include "repair_job.hpp"

#include <spdlog/spdlog.h>

#include <thread>

namespace smb {

// One RepairJob (repair_job.hpp) at a time. A client that was not paused
// holds again within a second of its keepers' return (repair_watch.cpp):
// the repair is tried again until the timeout.
RepairReport ClientCore::repair(std::string_view name) {
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  // Servers that restarted since a replacement have forgotten it (replace.cpp).
  if (!published_server_map_.exchange(true)) publish_server_map();
  for (;;) {
    try {
      return client::RepairJob(*this, std::string(name)).run();
    } catch (const client::UnpausedWriters& e) {
      if (std::chrono::steady_clock::now() > deadline) throw Error(e.code(), e.what());
      spdlog::debug("{}; trying again", e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

}  // namespace smb
