#pragma once
// A repair's copying (repair_job.hpp runs it): one copy being rebuilt, its
// target segment made or opened and its source opened; copying ranges of
// it a few chunks in flight; finding, by the two servers' digests, the
// chunks that differ; and checking, before the final pass, that nobody
// unpaused could still write what is being copied.
#include "client_core.hpp"
#include "repair_plan.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace smb::client {

// A repair that found a client with a copy open whom it could not pause
// (check_sources): it changed nothing, and is tried again.
struct UnpausedWriters : Error {
  using Error::Error;
};

struct Range {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

// Ranges of at most kRepairChunk covering [0, length).
std::vector<Range> whole(std::uint64_t length);
std::uint64_t total(const std::vector<Range>& ranges);

// A copy being rebuilt: the segment made for it and the one it copies.
struct CopyJob {
  ServerLink* to = nullptr;
  ServerLink* from = nullptr;
  std::string target_name, source_name;
  std::unique_ptr<transport::RemoteSegment> target, source;
  protocol::Body source_segment;  // the source's open_segment reply (a pull_copy names it)
  std::uint64_t length = 0;
  bool in_place = false;
  // Whether the target's smbd pulls the bytes from the source's (pull_copy);
  // false once it could not, where both servers' memory is mapped into
  // this client (one host), or with SMB_REPAIR_COPY=client: this client then
  // copies them itself.
  bool server_to_server = true;
  // Bytes of the other copies rebuilt on the same server: its smbd pulls
  // one copy at a time, so a pull may wait for theirs first.
  std::uint64_t queued_before = 0;
};

// (server, segment) pairs a repair opened or made, to close or destroy when it ends.
using SegmentsAt = std::vector<std::pair<std::string, std::string>>;

// Makes the segment of the copy on a restarted server, or opens the stale
// one in place, and opens its source; adds what it opened and made.
CopyJob prepare_copy(ClientCore& core, const Layout& layout, const Rebuild& rebuild, SegmentsAt& opened,
                     SegmentsAt& allocated);
// Where the two copies differ, by their servers' digests.
std::vector<Range> differing(CopyJob& job);
// Copies `ranges` from the source to the target: server to server where it
// can (job.server_to_server), else through this client.
void copy_ranges(ClientCore& core, CopyJob& job, const std::vector<Range>& ranges);

// The segments a repair copies from (and, rebuilt in place, to) that no
// client but the repair has open, each with how many handles its server
// ever gave out (segment_clients' "opens"). Taken before the bulk copy: if
// check_sources finds the same, nobody could write them meanwhile.
using QuietSegments = std::map<std::pair<ServerLink*, std::string>, std::uint64_t>;
QuietSegments quiet_segments(ClientCore& core, const std::string& name, const std::vector<CopyJob>& jobs);

// Before the final pass: no source behind its primary (data_lost), and no
// client with a copied segment open that was not paused (UnpausedWriters).
// Returns whether every copied segment is still as `quiet` says: no client
// but the repair opened any since, so the bulk copy has their bytes.
bool check_sources(ClientCore& core, const std::string& name, const std::vector<CopyJob>& jobs,
                   const std::set<std::uint64_t>& paused, const QuietSegments& quiet);

}  // namespace smb::client
