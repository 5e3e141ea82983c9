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
#include "repair_plan.hpp"

#include "protocol/layout_codec.hpp"
#include "protocol/striping.hpp"
#include "util/parse.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <future>
#include <set>
#include <thread>

namespace smb {

using protocol::Body;
using protocol::MessageType;

namespace {

// Bytes per read and write while copying, and chunks being read or written at once.
constexpr std::uint64_t kRepairChunk = 4u << 20;
constexpr std::size_t kChunksInFlight = 4;
// Bytes per digest: what a pass recopies where one byte changed.
constexpr std::uint64_t kDigestChunk = 1u << 20;
constexpr std::size_t kDigestBytes = 16;  // XXH3-128 (smbd's SegmentStore::digest)
// Passes that recopy what clients changed while the copy ran, before the
// pause; they stop early once a pass finds at most 1/16 of the bytes changed.
constexpr int kCatchUpPasses = 4;
constexpr std::uint64_t kSmallEnough = 16;

using client::Rebuild;

struct Range {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

// Ranges of at most kRepairChunk covering [0, length).
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

// The digests of a copy's segment, kDigestChunk bytes each, computed by its server.
std::vector<std::uint8_t> digests(client::ServerLink& l, const std::string& segment, std::uint64_t length) {
  std::vector<std::uint8_t> out;
  constexpr std::uint64_t kPerCall = protocol::kMaxDigests * kDigestChunk;
  for (std::uint64_t at = 0; at < length; at += kPerCall) {
    const auto n = std::min(kPerCall, length - at);
    auto reply = l.control->call(MessageType::segment_digest,
                                 {{"name", segment}, {"offset", at}, {"length", n}, {"chunk", kDigestChunk}});
    const auto got = protocol::get_binary(reply, "digests", "segment_digest");
    if (got.size() != (n + kDigestChunk - 1) / kDigestChunk * kDigestBytes)
      throw Error(Errc::protocol, "server " + l.control->peer() + ": " + std::to_string(got.size()) +
                                      " bytes of digests for " + std::to_string(n) + " bytes of '" + segment + "'");
    out.insert(out.end(), got.begin(), got.end());
  }
  return out;
}

// A repair that found a client with a copy open whom it could not pause
// (check_sources): it changed nothing, and is tried again.
struct UnpausedWriters : Error {
  using Error::Error;
};

// A copy being rebuilt: the segment made for it and the one it copies.
struct CopyJob {
  client::ServerLink* to = nullptr;
  client::ServerLink* from = nullptr;
  std::string target_name, source_name;
  std::unique_ptr<transport::RemoteSegment> target, source;
  std::uint64_t length = 0;
  bool in_place = false;
};

CopyJob prepare_copy(ClientCore& core, const Layout& layout, const Rebuild& rebuild,
                     std::vector<std::pair<std::string, std::string>>& opened,
                     std::vector<std::pair<std::string, std::string>>& allocated);
std::vector<Range> differing(CopyJob& job);
void copy_ranges(ClientCore& core, CopyJob& job, const std::vector<Range>& ranges);
void check_sources(ClientCore& core, const std::string& name, const std::vector<CopyJob>& jobs,
                   const std::set<std::uint64_t>& paused);

}  // namespace

// A client that was not paused holds again within a second of its keepers'
// return (repair_watch.cpp): the repair is tried again until the timeout.
RepairReport ClientCore::repair(std::string_view name) {
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  for (;;) {
    try {
      return repair_once(name);
    } catch (const UnpausedWriters& e) {
      if (std::chrono::steady_clock::now() > deadline) throw Error(e.code(), e.what());
      spdlog::debug("{}; trying again", e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

RepairReport ClientCore::repair_once(std::string_view name_view) {
  const std::string name(name_view);
  protocol::validate_name(name);
  const auto started = std::chrono::steady_clock::now();
  const std::string context = "repair buffer '" + name + "'";
  // The record's keepers (the home, and the next server for a replicated
  // buffer): every one that has it is taken for the repair; one reachable
  // without it (it restarted) gets it back at the end.
  const auto keepers = keepers_of(name);
  for (const auto& keeper : keepers) {
    try {
      relink(keeper);  // one that restarted since this client last reached it
    } catch (const Error&) {
    }
  }
  auto [reply, first] = ask_keepers(name, MessageType::begin_repair, {{"name", name}});
  auto layout = protocol::layout_from_body(reply["layout"], "begin_repair");
  const auto n = layout.servers.size();
  std::vector<client::ServerLink*> taken{&link(first)};
  std::vector<std::string> missing, behind;  // keepers without the record, or with older runs in it
  // Ends the repair at every keeper taken; with instances it commits it.
  // Once one keeper recorded the new runs the rebuilt copies are in use: a
  // keeper that fails then is said and left behind (the next repair brings
  // it up to date); only when none did does the repair fail.
  const auto end_repairs = [&](const Body& end) {
    std::optional<Error> failure;
    std::size_t ended = 0;
    for (auto* keeper : taken) {
      try {
        keeper->control->call(MessageType::end_repair, end);
        ++ended;
      } catch (const Error& e) {
        spdlog::warn("{}: ending it on {}: {}", context, keeper->control->peer(), e.what());
        if (!failure) failure = e;
      }
    }
    if (ended == 0 && failure) throw *failure;
  };
  // The keepers' records differ where a repair ended while one of them was
  // unreachable: where the other names a server's current run and ours does
  // not, the other is newer there (runs change only to a server's current one).
  const auto take_newer_runs = [&](const Layout& theirs) {
    bool changed = false;
    for (std::size_t i = 0; i < n && i < theirs.instances.size() && i < layout.instances.size(); ++i) {
      if (theirs.instances[i] == layout.instances[i]) continue;
      try {
        if (link(layout.servers[i]).instance != theirs.instances[i]) continue;
      } catch (const Error&) {
        continue;
      }
      layout.instances[i] = theirs.instances[i];
      changed = true;
    }
    return changed;
  };
  if (layout.replicas > 1) {
    for (const auto& other : keepers) {
      if (other == first) continue;
      try {
        const auto theirs =
            protocol::layout_from_body(link(other).control->call(MessageType::begin_repair, {{"name", name}})["layout"],
                                       "begin_repair");
        taken.push_back(&link(other));
        for (const auto& copy : theirs.stale)  // a mark one keeper missed: rebuilt all the same
          if (!protocol::is_stale(layout, copy)) layout.stale.push_back(copy);
        if (take_newer_runs(theirs)) behind.push_back(first);
        if (theirs.instances != layout.instances) behind.push_back(other);
      } catch (const Error& e) {
        if (e.code() == Errc::not_found) {
          missing.push_back(other);
        } else if (!client::is_absence(e)) {
          try {
            end_repairs({{"name", name}});
          } catch (const Error&) {
          }
          throw Error(e.code(), context + ": " + e.what());
        }
      }
    }
  }

  // Until end_repair the record is ours; whatever fails undoes what was made.
  std::vector<std::pair<std::string, std::string>> opened, allocated;  // (server, segment)
  std::vector<CopyJob> jobs;
  const auto release = [&](bool destroy_allocated) {
    jobs.clear();
    for (const auto& [server, segment] : opened) {
      try {
        link(server).control->call(MessageType::close_segment, {{"name", segment}});
      } catch (const Error&) {
      }
    }
    if (!destroy_allocated) return;
    for (const auto& [server, segment] : allocated) {
      try {
        link(server).control->call(MessageType::destroy, {{"name", segment}});
      } catch (const Error&) {
      }
    }
  };

  RepairReport report;
  report.name = name;
  std::optional<std::chrono::steady_clock::time_point> paused_at;
  try {
    if (layout.replicas == 1)
      throw Error(Errc::invalid_argument, "it has one copy: nothing to rebuild a lost share from (make buffers that "
                                          "must survive a server with replicas = 2)");
    refresh_links(layout, true);  // a server that restarted since this client last reached it
    const auto states = check(layout);
    std::vector<bool> present(n);
    for (std::size_t i = 0; i < n; ++i) {
      present[i] = states[i] == ShareState::ok;
      if (states[i] == ShareState::unreachable) report.unreachable.push_back(layout.servers[i]);
    }
    check_copies_left(layout, present, context);

    // What to rebuild, where, from which copy (repair_plan.hpp).
    const auto plan = client::plan_repair(layout, states);
    const auto& rebuilds = plan.rebuilds;
    if (!rebuilds.empty()) {
      for (const auto& rebuild : rebuilds) {
        jobs.push_back(prepare_copy(*this, layout, rebuild, opened, allocated));
        report.repaired.push_back({layout.servers[rebuild.target], rebuild.replica, layout.servers[rebuild.source],
                                   rebuild.length});
      }
      std::uint64_t bytes = 0;
      for (auto& job : jobs) {
        copy_ranges(*this, job, whole(job.length));
        report.bytes += job.length;
        bytes += job.length;
      }
      // Clients wrote the source meanwhile: recopy what changed until little does.
      const auto recopy = [&] {
        std::uint64_t changed = 0;
        for (auto& job : jobs) {
          const auto ranges = differing(job);
          copy_ranges(*this, job, ranges);
          changed += total(ranges);
        }
        report.bytes += changed;
        report.recopied += changed;
        return changed;
      };
      for (int pass = 0; pass < kCatchUpPasses; ++pass)
        if (recopy() <= bytes / kSmallEnough) break;
      // The final pass, with every client that holds the buffer paused
      // (each holds it at every keeper it reached: the most any keeper counts).
      paused_at = std::chrono::steady_clock::now();
      const auto pause_limit = options_.timeout + std::chrono::seconds(5);
      std::set<std::uint64_t> paused_clients;
      for (auto* keeper : taken) {
        auto paused = keeper->control->call(
            MessageType::pause_holders,
            {{"name", name}, {"timeout_ms", static_cast<std::uint64_t>(pause_limit.count())}}, pause_limit);
        report.clients_paused = std::max(report.clients_paused, protocol::get_u64(paused, "holders", "pause_holders"));
        for (const auto& id : paused.value("clients", Body::array()))
          if (id.is_number_unsigned()) paused_clients.insert(id.get<std::uint64_t>());
      }
      check_sources(*this, name, jobs, paused_clients);
      recopy();
      for (auto& job : jobs) {
        const auto version = protocol::get_u64(
            job.from->control->call(MessageType::get_version, {{"name", job.source_name}}), "version", "get_version");
        job.to->control->call(MessageType::set_version, {{"name", job.target_name}, {"version", version}});
      }
    }
    release(false);
    opened.clear();
    Body end{{"name", name}};
    auto repaired = client::after_repair(layout, plan);
    if (!rebuilds.empty())
      for (const auto x : plan.restarted) repaired.instances[x] = link(layout.servers[x]).instance;
    if (!rebuilds.empty() || !behind.empty()) end["instances"] = repaired.instances;
    protocol::Body fresh = protocol::Body::array();  // the stale copies among them are fresh again
    for (const auto& copy : plan.fresh) fresh.push_back({copy.replica, copy.server});
    if (!fresh.empty()) end["fresh"] = std::move(fresh);
    end_repairs(end);  // the paused clients go on, with the rebuilt copies
    report.records_restored = behind;
    restore_records(repaired, missing, *taken.front(), report);
  } catch (const Error& e) {
    release(true);
    try {
      end_repairs({{"name", name}});
    } catch (const Error&) {
      // Our session's end releases the record (and the paused clients) too.
    }
    if (dynamic_cast<const UnpausedWriters*>(&e) != nullptr) throw UnpausedWriters(e.code(), context + ": " + e.what());
    throw Error(e.code(), context + ": " + e.what());
  }
  const auto ended = std::chrono::steady_clock::now();
  if (paused_at) report.paused_seconds = std::chrono::duration<double>(ended - *paused_at).count();
  report.seconds = std::chrono::duration<double>(ended - started).count();
  if (!report.repaired.empty())
    spdlog::debug("{}: {} copies rebuilt, {} in {:.2f} s ({} recopied, {} clients paused {:.3f} s)", context,
                  report.repaired.size(), util::format_bytes(report.bytes), report.seconds,
                  util::format_bytes(report.recopied), report.clients_paused, report.paused_seconds);
  return report;
}

// Writes the record back to keepers that restarted without it; one that
// fails is said and left for the next repair (the record is kept by the
// other keeper meanwhile). A copy that a client recorded stale meanwhile
// reached only `current` (the keeper it was written back to had no record
// to mark): such marks are copied over once the record is there, after
// which every mark reaches both.
void ClientCore::restore_records(const Layout& layout, const std::vector<std::string>& keepers,
                                 client::ServerLink& current, RepairReport& report) {
  for (const auto& keeper : keepers) {
    client::ServerLink* l = nullptr;
    try {
      l = &link(keeper);
      l->control->call(MessageType::reserve_name, {{"name", layout.name}, {"layout", protocol::layout_to_body(layout)}});
      l->control->call(MessageType::commit_layout, {{"name", layout.name}});
      report.records_restored.push_back(keeper);
    } catch (const Error& e) {
      spdlog::warn("repair buffer '{}': its layout record could not be written back to {}: {}", layout.name, keeper,
                   e.what());
      continue;
    }
    try {
      const auto now = protocol::layout_from_body(
          current.control->call(MessageType::get_layout, {{"name", layout.name}})["layout"], "get_layout");
      for (const auto& copy : now.stale)
        if (!protocol::is_stale(layout, copy))
          l->control->call(MessageType::mark_stale,
                           stale_mark(layout.name, copy, "recorded at the other keeper while this one had no record"));
    } catch (const Error& e) {
      spdlog::warn("repair buffer '{}': copies recorded stale meanwhile could not be copied to {}: {}", layout.name,
                   keeper, e.what());
    }
  }
}

namespace {

// Makes the segment of the copy on a restarted server (a new one: one there
// is what an interrupted repair left, which no client uses), or opens the
// stale one that clients hold (in place), and opens its source.
CopyJob prepare_copy(ClientCore& core, const Layout& layout, const Rebuild& rebuild,
                     std::vector<std::pair<std::string, std::string>>& opened,
                     std::vector<std::pair<std::string, std::string>>& allocated) {
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
  job.target = job.to->channel->attach(client::segment_from(made, rebuild.in_place ? "open_segment" : "alloc_segment"));
  if (rebuild.in_place && job.target->descriptor().length != job.length)
    throw Error(Errc::protocol, "server " + layout.servers[target] + ": its stale copy is " +
                                    std::to_string(job.target->descriptor().length) + " bytes, the layout says " +
                                    std::to_string(job.length));
  auto source_reply = job.from->control->call(MessageType::open_segment, {{"name", job.source_name}});
  opened.emplace_back(layout.servers[source], job.source_name);
  job.source = job.from->channel->attach(client::segment_from(source_reply, "open_segment"));
  if (job.source->descriptor().length != job.length)
    throw Error(Errc::protocol, "server " + layout.servers[source] + ": its copy is " +
                                    std::to_string(job.source->descriptor().length) + " bytes, the layout says " +
                                    std::to_string(job.length));
  return job;
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
void check_sources(ClientCore& core, const std::string& name, const std::vector<CopyJob>& jobs,
                   const std::set<std::uint64_t>& paused) {
  const bool own_open = core.has_open(name);
  std::set<std::pair<client::ServerLink*, std::string>> checked;
  for (const auto& job : jobs) {
    std::vector<std::pair<client::ServerLink*, std::string>> copies{{job.from, job.source_name}};
    if (job.in_place) copies.emplace_back(job.to, job.target_name);
    for (const auto& [link, segment] : copies) {
      if (!checked.insert({link, segment}).second) continue;
      const auto reply = link->control->call(MessageType::segment_clients, {{"name", segment}});
      if (segment == job.source_name && link == job.from && reply.value("behind", false))
        throw Error(Errc::data_lost, "copy '" + segment + "' on server " + link->control->peer() +
                                         ", the one left to rebuild from, fell behind its primary (an op before one "
                                         "it was sent never came) and lacks ops the other had: it is not copied");
      std::size_t unpaused = 0;
      for (const auto& entry : reply.value("clients", Body::array())) {
        const auto id = entry.is_number_unsigned() ? entry.get<std::uint64_t>() : 0;
        if (id == core.id() && !own_open) continue;
        if (id == 0 || !paused.contains(id)) ++unpaused;
      }
      if (unpaused > 0)
        throw UnpausedWriters(Errc::busy,
                              std::to_string(unpaused) + " client(s) with copy '" + segment + "' open on server " +
                                  link->control->peer() +
                                  " were not paused: they hold the buffer at no keeper "
                                  "this repair reached (a client whose keepers restarted holds there again "
                                  "within a second of their return), so their writes could miss the rebuilt "
                                  "copy; nothing was changed: retry");
    }
  }
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

// Copies `ranges` (each at most kRepairChunk) from the source to the
// target, a few in flight: each is read while the reads after it run, then
// written; its slot is reused once that write completed.
void copy_ranges(ClientCore& core, CopyJob& job, const std::vector<Range>& ranges) {
  const auto transfer = [&](client::ServerLink& l, const char* op, std::uint64_t offset, std::uint64_t bytes) {
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

}  // namespace smb
