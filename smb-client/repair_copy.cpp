#include "repair_copy.hpp"

#include "protocol/layout_codec.hpp"
#include "protocol/segment_codec.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <future>
#include <optional>
#include <set>
#include <string_view>

namespace smb::client {

using protocol::Body;
using protocol::MessageType;

namespace {

// Bytes per read and write while copying, and chunks being read or written at once.
constexpr std::uint64_t kRepairChunk = 4u << 20;
constexpr std::size_t kChunksInFlight = 4;
// Bytes per digest: what a pass recopies where one byte changed.
constexpr std::uint64_t kDigestChunk = 1u << 20;
constexpr std::size_t kDigestBytes = 16;  // XXH3-128 (smbd's SegmentStore::digest)

// The digests of a copy's segment, kDigestChunk bytes each, computed by its server.
// Digests and pulls go over connections of their own (l.waits): a repair's
// copies run at once, and one connection answers one call at a time.
std::vector<std::uint8_t> digests(ServerLink& l, const std::string& segment, std::uint64_t length) {
  std::vector<std::uint8_t> out;
  constexpr std::uint64_t kPerCall = protocol::kMaxDigests * kDigestChunk;
  const auto connection = l.waits->acquire();
  for (std::uint64_t at = 0; at < length; at += kPerCall) {
    const auto n = std::min(kPerCall, length - at);
    auto reply = connection->call(MessageType::segment_digest,
                                 {{"name", segment}, {"offset", at}, {"length", n}, {"chunk", kDigestChunk}});
    const auto got = protocol::get_binary(reply, "digests", "segment_digest");
    if (got.size() != (n + kDigestChunk - 1) / kDigestChunk * kDigestBytes)
      throw Error(Errc::protocol, "server " + l.control->peer() + ": " + std::to_string(got.size()) +
                                      " bytes of digests for " + std::to_string(n) + " bytes of '" + segment + "'");
    out.insert(out.end(), got.begin(), got.end());
  }
  return out;
}

}  // namespace

std::vector<Range> whole(std::uint64_t length) {
  std::vector<Range> out;
  for (std::uint64_t at = 0; at < length; at += kRepairChunk) out.push_back({at, std::min(kRepairChunk, length - at)});
  return out;
}

std::uint64_t total(const std::vector<Range>& ranges) {
  std::uint64_t sum = 0;
  for (const auto& r : ranges) sum += r.length;
  return sum;
}

// Makes the segment of the copy on a restarted server (a new one: one there
// is what an interrupted repair left, which no client uses), or opens the
// stale one that clients hold (in place), and opens its source.
CopyJob prepare_copy(ClientCore& core, const Layout& layout, const Rebuild& rebuild, SegmentsAt& opened,
                     SegmentsAt& allocated) {
  const auto target = rebuild.target;
  const auto source = rebuild.source;
  CopyJob job;
  job.length = rebuild.length;
  job.in_place = rebuild.in_place;
  job.target_name = protocol::segment_name(layout.name, rebuild.replica);
  job.source_name = protocol::segment_name(layout.name, rebuild.source_replica);
  job.to = &core.link(layout.servers[target]);
  job.from = &core.link(layout.servers[source]);
  const Body alloc{{"name", job.target_name}, {"length", job.length}};
  Body made;
  if (rebuild.in_place) {
    made = job.to->control->call(MessageType::open_segment, {{"name", job.target_name}});
  } else {
    try {
      made = job.to->control->call(MessageType::alloc_segment, alloc);
    } catch (const Error& e) {
      if (e.code() != Errc::already_exists) throw;
      job.to->control->call(MessageType::destroy, {{"name", job.target_name}});
      made = job.to->control->call(MessageType::alloc_segment, alloc);
    }
    allocated.emplace_back(layout.servers[target], job.target_name);
  }
  opened.emplace_back(layout.servers[target], job.target_name);
  job.target = job.to->channel->attach(protocol::segment_from(made, rebuild.in_place ? "open_segment" : "alloc_segment"));
  if (rebuild.in_place && job.target->descriptor().length != job.length)
    throw Error(Errc::protocol, "server " + layout.servers[target] + ": its stale copy is " +
                                    std::to_string(job.target->descriptor().length) + " bytes, the layout says " +
                                    std::to_string(job.length));
  job.source_segment = job.from->control->call(MessageType::open_segment, {{"name", job.source_name}});
  opened.emplace_back(layout.servers[source], job.source_name);
  job.source = job.from->channel->attach(protocol::segment_from(job.source_segment, "open_segment"));
  if (job.source->descriptor().length != job.length)
    throw Error(Errc::protocol, "server " + layout.servers[source] + ": its copy is " +
                                    std::to_string(job.source->descriptor().length) + " bytes, the layout says " +
                                    std::to_string(job.length));
  return job;
}

namespace {

// A segment a repair copies from (source), or rebuilds in place.
struct CopiedSegment {
  ServerLink* link;
  std::string name;
  bool source;
};

std::vector<CopiedSegment> copied_segments(const std::vector<CopyJob>& jobs) {
  std::vector<CopiedSegment> out;
  std::set<std::pair<ServerLink*, std::string>> seen;
  for (const auto& job : jobs) {
    if (seen.insert({job.from, job.source_name}).second) out.push_back({job.from, job.source_name, true});
    if (job.in_place && seen.insert({job.to, job.target_name}).second) out.push_back({job.to, job.target_name, false});
  }
  return out;
}

// What the segment's server says of who has it open: the identities of the
// clients other than this repair (0: one that gave none) and the handles it
// ever gave out (nullopt from a server that does not say).
struct SegmentClients {
  std::vector<std::uint64_t> others;
  std::optional<std::uint64_t> opens;
  bool behind = false;
};

SegmentClients segment_clients(ClientCore& core, bool own_open, const CopiedSegment& copy) {
  const auto reply = copy.link->control->call(MessageType::segment_clients, {{"name", copy.name}});
  SegmentClients out;
  for (const auto& entry : reply.value("clients", Body::array())) {
    const auto id = entry.is_number_unsigned() ? entry.get<std::uint64_t>() : 0;
    if (id != core.id() || own_open) out.others.push_back(id);  // the copy jobs' own handles are this client's
  }
  if (const auto it = reply.find("opens"); it != reply.end() && it->is_number_unsigned())
    out.opens = it->get<std::uint64_t>();
  out.behind = reply.value("behind", false);
  return out;
}

}  // namespace

QuietSegments quiet_segments(ClientCore& core, const std::string& name, const std::vector<CopyJob>& jobs) {
  const bool own_open = core.has_open(name);
  QuietSegments quiet;
  for (const auto& copy : copied_segments(jobs)) {
    const auto clients = segment_clients(core, own_open, copy);
    if (clients.others.empty() && clients.opens) quiet[{copy.link, copy.name}] = *clients.opens;
  }
  return quiet;
}

// Before the final pass. A source that its server says fell behind its
// primary lacks ops the lost copy had: copying it would record old data as
// whole, so the repair fails (data_lost). And whoever holds open a copy
// that this repair copies from (or rebuilds in place) can write it, and
// what one writes after the final pass's digests
// would be missing from the rebuilt copy: the repair would then record as
// whole a copy that lacks acknowledged writes and ops. Holders of the
// record are paused by now; a client with the copy open that holds the
// record at no keeper we paused through (its keepers restarted, and it has
// not held again yet) cannot be, so the repair ends here, changing
// nothing. This client's own session counts only where it has the buffer
// open itself: the copy jobs' handles are its own.
bool check_sources(ClientCore& core, const std::string& name, const std::vector<CopyJob>& jobs,
                   const std::set<std::uint64_t>& paused, const QuietSegments& quiet) {
  const bool own_open = core.has_open(name);
  bool still_quiet = true;
  for (const auto& copy : copied_segments(jobs)) {
    const auto clients = segment_clients(core, own_open, copy);
    if (copy.source && clients.behind)
      throw Error(Errc::data_lost, "copy '" + copy.name + "' on server " + copy.link->control->peer() +
                                       ", the one left to rebuild from, fell behind its primary (an op before one "
                                       "it was sent never came) and lacks ops the other had: it is not copied");
    const auto unpaused = std::count_if(clients.others.begin(), clients.others.end(),
                                        [&](std::uint64_t id) { return id == 0 || !paused.contains(id); });
    if (unpaused > 0)
      throw UnpausedWriters(Errc::busy,
                            std::to_string(unpaused) + " client(s) with copy '" + copy.name + "' open on server " +
                                copy.link->control->peer() +
                                " were not paused: they hold the buffer at no keeper "
                                "this repair reached (a client whose keepers restarted holds there again "
                                "within a second of their return), so their writes could miss the rebuilt "
                                "copy; nothing was changed: retry");
    const auto before = quiet.find({copy.link, copy.name});
    still_quiet = still_quiet && clients.others.empty() && before != quiet.end() && clients.opens == before->second;
  }
  return still_quiet;
}

// Where the two copies differ, by their servers' digests (both computed at
// once), in ranges of adjacent chunks.
std::vector<Range> differing(CopyJob& job) {
  auto source = std::async(std::launch::async, [&] { return digests(*job.from, job.source_name, job.length); });
  const auto target = digests(*job.to, job.target_name, job.length);
  const auto expected = source.get();
  std::vector<Range> out;
  for (std::uint64_t k = 0; k * kDigestChunk < job.length; ++k) {
    if (std::memcmp(&expected[k * kDigestBytes], &target[k * kDigestBytes], kDigestBytes) == 0) continue;
    const auto offset = k * kDigestChunk;
    const auto length = std::min(kDigestChunk, job.length - offset);
    if (!out.empty() && out.back().offset + out.back().length == offset && out.back().length + length <= kRepairChunk)
      out.back().length += length;
    else
      out.push_back({offset, length});
  }
  return out;
}

namespace {

// Bytes per pull_copy call. Each call connects the target's smbd to the
// source's anew and drains its pipeline at the end, so a call takes a whole
// copy of a usual size (a connect and a drain per 32 MiB were a fifth of a
// TCP repair). The reply may take the usual timeout plus the batch at
// kSlowestPull: the puller itself gives up on a read that stalls.
constexpr std::uint64_t kPullBatch = 256u << 20;
constexpr std::uint64_t kSlowestPull = 8u << 20;  // bytes per second, soft-RoCE under emulation well above it

bool copies_through_client() {
  const char* how = std::getenv("SMB_REPAIR_COPY");  // (read per repair: tests set it)
  return how != nullptr && std::string_view(how) == "client";
}

// The target's smbd reads `ranges` from the source's into the copy itself;
// false where it could not reach the source (another network between
// servers, a job's credential: pull_copy is the fabric secret's), and
// nothing was copied.
bool pull_ranges(CopyJob& job, const std::vector<Range>& ranges) {
  const auto connection = job.to->waits->acquire();
  for (std::size_t k = 0; k < ranges.size();) {
    const bool first = k == 0;
    Body batch = Body::array();
    std::uint64_t bytes = 0;
    for (; k < ranges.size() && (batch.empty() || bytes + ranges[k].length <= kPullBatch); ++k) {
      batch.push_back(Body::array({ranges[k].offset, ranges[k].length}));
      bytes += ranges[k].length;
    }
    const std::chrono::milliseconds pulling{(bytes + job.queued_before) * 1000 / kSlowestPull};
    try {
      connection->call(MessageType::pull_copy, {{"name", job.target_name},
                                                     {"from", job.from->control->peer()},
                                                     {"address", protocol::binary(job.from->transport_address)},
                                                     {"ticket", protocol::binary(job.from->ticket)},
                                                     {"segment", job.source_segment},
                                                     {"ranges", std::move(batch)}},
                       pulling);
    } catch (const Error& e) {
      const bool could_not = e.code() == Errc::permission_denied || e.code() == Errc::unreachable ||
                             e.code() == Errc::transport;
      if (!could_not || !first) throw;  // (a later batch: the source was reached before)
      return false;
    }
  }
  return true;
}

// Copies `ranges` (each at most kRepairChunk) from the source to the
// target through this client, a few in flight: each is read while the
// reads after it run, then written; its slot is reused once that write
// completed.
void copy_through_client(ClientCore& core, CopyJob& job, const std::vector<Range>& ranges) {
  const auto transfer = [&](ServerLink& l, const char* op, std::uint64_t offset, std::uint64_t bytes) {
    auto state = std::make_shared<Request::State>();
    state->client = core.shared_from_this();
    state->links.push_back(&l);
    state->what = [op, offset, bytes, server = l.control->peer()] {
      return std::string(op) + " of " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
             " of a copy on " + server;
    };
    state->completion->expect();
    return state;
  };
  // Both copies mapped here (one host, shared memory): each range is one
  // copy between the mappings (a synchronous write from the source's),
  // not a read into a buffer and a write out of it (docs/reliability.md).
  if (const std::byte* from = job.source->mapped(0, job.length); from != nullptr && job.target->mapped(0, job.length)) {
    std::atomic_thread_fence(std::memory_order_acquire);  // as a read of the mapping does
    for (const auto& r : ranges) {
      auto put = transfer(*job.to, "write", r.offset, r.length);
      job.to->channel->put(*job.target, r.offset, from + r.offset, r.length, put->completion);
      Request(put).wait();
    }
    return;
  }
  struct Slot {
    std::vector<std::byte> bytes;
    Request read, write;
    std::uint64_t offset = 0;
  };
  std::array<Slot, kChunksInFlight> ring;
  const auto write_out = [&](Slot& slot) {
    slot.read.wait();
    auto put = transfer(*job.to, "write", slot.offset, slot.bytes.size());
    job.to->channel->put(*job.target, slot.offset, slot.bytes.data(), slot.bytes.size(), put->completion);
    slot.write = Request(put);
    slot.read = Request();
  };
  for (std::size_t k = 0; k < ranges.size(); ++k) {
    auto& slot = ring[k % ring.size()];
    if (slot.read.valid()) write_out(slot);  // the oldest chunk: written before its slot is reused
    if (slot.write.valid()) slot.write.wait();
    slot.offset = ranges[k].offset;
    slot.bytes.resize(ranges[k].length);
    auto read = transfer(*job.from, "read", slot.offset, slot.bytes.size());
    job.from->channel->get(*job.source, slot.offset, slot.bytes.data(), slot.bytes.size(), read->completion);
    slot.read = Request(read);
  }
  for (auto& slot : ring)
    if (slot.read.valid()) write_out(slot);
  for (auto& slot : ring)
    if (slot.write.valid()) slot.write.wait();
}

}  // namespace

void copy_ranges(ClientCore& core, CopyJob& job, const std::vector<Range>& ranges) {
  if (ranges.empty()) return;
  // Both servers' memory mapped here (one host, shared memory): a copy
  // through this client is a memcpy between the mappings, faster than the
  // server's reads (docs/reliability.md, "Repair throughput").
  const bool one_host = job.from->channel->caps().same_host_memory && job.to->channel->caps().same_host_memory;
  if (job.server_to_server && !one_host && !copies_through_client() && pull_ranges(job, ranges)) return;
  job.server_to_server = false;
  copy_through_client(core, job, ranges);
}

}  // namespace smb::client
