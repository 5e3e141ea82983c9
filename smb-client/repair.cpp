// Client::repair: rebuilds the copies of a replicated buffer that a
// restarted server lost, each from its other copy, and records the server's
// new run in the layout (docs/reliability.md, "Repair").
//
// A repair holds the buffer's layout record (begin_repair) from the start to
// the layout's update: opens wait meanwhile, and an open that began before
// confirms the record afterwards (client_core.cpp), so every client that has
// the buffer open has its handles on the copies before the repair looks for
// them. Writers write only the copies they know of, so a buffer open
// elsewhere is refused (busy) rather than copied under them.
#include "client_core.hpp"

#include "protocol/layout_codec.hpp"
#include "protocol/striping.hpp"
#include "util/parse.hpp"

#include <spdlog/spdlog.h>

#include <array>

namespace smb {

using protocol::Body;
using protocol::MessageType;

namespace {

// Bytes per read and write while copying, and chunks being read or written at once.
constexpr std::uint64_t kRepairChunk = 4u << 20;
constexpr std::size_t kChunksInFlight = 4;

// One copy to rebuild: copy `replica` on layout server `target`, from copy
// `source_replica` on server `source`.
struct Rebuild {
  std::uint32_t replica = 0;
  std::size_t target = 0;
  std::uint32_t source_replica = 0;
  std::size_t source = 0;
  std::uint64_t length = 0;
};

}  // namespace

// Every present server's handles on the buffer's segments: a client with
// the buffer open would write only the copies it knows of. Before the
// repair opened any, this client's own count too (a Buffer it holds).
void ClientCore::refuse_if_open(const Layout& layout, const std::vector<bool>& present, bool count_mine) {
  std::string users;
  bool mine = false;
  for (std::size_t i = 0; i < layout.servers.size(); ++i) {
    if (!present[i]) continue;
    std::uint64_t sessions = 0;
    for (std::uint32_t r = 0; r < layout.replicas; ++r) {
      if (copy_share(layout, r, i) == 0) continue;
      auto reply = link(layout.servers[i]).control->call(
          MessageType::segment_users, {{"name", protocol::segment_name(layout.name, r)}});
      sessions = std::max(sessions, protocol::get_u64(reply, "sessions", "segment_users"));
      mine = mine || (count_mine && reply.contains("mine") && protocol::get_u64(reply, "mine", "segment_users") > 0);
    }
    if (sessions > 0) users += (users.empty() ? "" : ", ") + std::to_string(sessions) + " on " + layout.servers[i];
  }
  if (!users.empty())
    throw Error(Errc::busy, "it is open in other clients (" + users +
                                "): close it there and retry (a buffer in use cannot be repaired yet)");
  if (mine) throw Error(Errc::busy, "this client has it open: close it first (a buffer in use cannot be repaired yet)");
}

RepairReport ClientCore::repair(std::string_view name_view) {
  const std::string name(name_view);
  protocol::validate_name(name);
  const auto started = std::chrono::steady_clock::now();
  const std::string context = "repair buffer '" + name + "'";
  auto& home = link(home_of(name));
  auto reply = home.control->call(MessageType::begin_repair, {{"name", name}});
  const auto layout = protocol::layout_from_body(reply["layout"], "begin_repair");
  const auto n = layout.servers.size();

  // Until end_repair the record is ours; whatever fails undoes what was made.
  std::vector<std::pair<std::string, std::string>> opened, allocated;  // (server, segment)
  const auto release = [&](bool destroy_allocated) {
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
  try {
    if (layout.replicas == 1)
      throw Error(Errc::invalid_argument, "it has one copy: nothing to rebuild a lost share from (make buffers that "
                                          "must survive a server with replicas = 2)");
    const auto states = check(layout);
    std::vector<bool> present(n);
    std::vector<std::size_t> restarted;
    for (std::size_t i = 0; i < n; ++i) {
      present[i] = states[i] == ShareState::ok;
      if (states[i] == ShareState::restarted) restarted.push_back(i);
      if (states[i] == ShareState::unreachable) report.unreachable.push_back(layout.servers[i]);
    }
    check_copies_left(layout, present, context);

    std::vector<Rebuild> rebuilds;
    for (const auto x : restarted)
      for (std::uint32_t r = 0; r < layout.replicas; ++r) {
        const auto length = copy_share(layout, r, x);
        if (length == 0) continue;
        const auto position = protocol::copy_position(static_cast<std::uint32_t>(x), r, static_cast<std::uint32_t>(n));
        for (std::uint32_t other = 0; other < layout.replicas; ++other) {
          const auto source = protocol::copy_server(position, other, static_cast<std::uint32_t>(n));
          if (other == r || !present[source]) continue;
          rebuilds.push_back({r, x, other, source, length});
          break;
        }
      }
    if (!rebuilds.empty()) {
      refuse_if_open(layout, present, true);
      for (const auto& rebuild : rebuilds) {
        report.bytes += rebuild_copy(layout, rebuild.replica, rebuild.target, rebuild.source_replica, rebuild.source,
                                     opened, allocated);
        report.repaired.push_back({layout.servers[rebuild.target], rebuild.replica, layout.servers[rebuild.source],
                                   rebuild.length});
      }
      refuse_if_open(layout, present, false);  // opens wait for us: none can have come (a client of an older libsmb might)
    }
    release(false);
    opened.clear();
    Body end{{"name", name}};
    if (!rebuilds.empty()) {
      auto instances = layout.instances;
      for (const auto x : restarted) instances[x] = link(layout.servers[x]).instance;
      end["instances"] = instances;
    }
    home.control->call(MessageType::end_repair, end);
  } catch (const Error& e) {
    release(true);
    try {
      home.control->call(MessageType::end_repair, {{"name", name}});
    } catch (const Error&) {
      // Our session's end releases the record too.
    }
    throw Error(e.code(), context + ": " + e.what());
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!report.repaired.empty())
    spdlog::debug("{}: {} copies rebuilt, {} in {:.2f} s", context, report.repaired.size(),
                 util::format_bytes(report.bytes), report.seconds);
  return report;
}

// Copies one copy's segment from its other copy, a few chunks in flight,
// then gives it the source's version (vector ops
// on the copies are ordered by it: replicated_io.cpp).
std::uint64_t ClientCore::rebuild_copy(const Layout& layout, std::uint32_t replica, std::size_t target,
                                       std::uint32_t source_replica, std::size_t source,
                                       std::vector<std::pair<std::string, std::string>>& opened,
                                       std::vector<std::pair<std::string, std::string>>& allocated) {
  const auto length = copy_share(layout, replica, target);
  const auto target_name = protocol::segment_name(layout.name, replica);
  const auto source_name = protocol::segment_name(layout.name, source_replica);
  auto& to = link(layout.servers[target]);
  auto& from = link(layout.servers[source]);

  // A segment already there is what an interrupted repair left: the layout
  // names an earlier run of this server, so no client holds it.
  const Body alloc{{"name", target_name}, {"length", length}};
  Body made;
  try {
    made = to.control->call(MessageType::alloc_segment, alloc);
  } catch (const Error& e) {
    if (e.code() != Errc::already_exists) throw;
    to.control->call(MessageType::destroy, {{"name", target_name}});
    made = to.control->call(MessageType::alloc_segment, alloc);
  }
  allocated.emplace_back(layout.servers[target], target_name);
  opened.emplace_back(layout.servers[target], target_name);
  auto target_segment = to.channel->attach(client::segment_from(made, "alloc_segment"));
  auto source_reply = from.control->call(MessageType::open_segment, {{"name", source_name}});
  opened.emplace_back(layout.servers[source], source_name);
  auto source_segment = from.channel->attach(client::segment_from(source_reply, "open_segment"));
  if (source_segment->descriptor().length != length)
    throw Error(Errc::protocol, "server " + layout.servers[source] + ": its copy is " +
                                    std::to_string(source_segment->descriptor().length) + " bytes, the layout says " +
                                    std::to_string(length));
  const auto version =
      protocol::get_u64(from.control->call(MessageType::get_version, {{"name", source_name}}), "version", "get_version");

  const auto transfer = [&](client::ServerLink& l, const char* op, std::uint64_t offset, std::uint64_t bytes) {
    auto state = std::make_shared<Request::State>();
    state->client = shared_from_this();
    state->links.push_back(&l);
    state->what = [op, offset, bytes, server = l.control->peer()] {
      return std::string(op) + " of " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
             " of a copy on " + server;
    };
    state->completion->expect();
    return state;
  };
  // A ring of chunks: chunk k is read while the reads after it run, then
  // written; its slot is reused once that write completed.
  struct Slot {
    std::vector<std::byte> bytes;
    Request read, write;
    std::uint64_t offset = 0;
  };
  std::array<Slot, kChunksInFlight> ring;
  const auto write_out = [&](Slot& slot) {
    slot.read.wait();
    auto put = transfer(to, "write", slot.offset, slot.bytes.size());
    to.channel->put(*target_segment, slot.offset, slot.bytes.data(), slot.bytes.size(), put->completion);
    slot.write = Request(put);
    slot.read = Request();
  };
  for (std::uint64_t offset = 0, k = 0; offset < length; offset += kRepairChunk, ++k) {
    auto& slot = ring[k % ring.size()];
    if (slot.read.valid()) write_out(slot);  // the oldest chunk: written before its slot is reused
    if (slot.write.valid()) slot.write.wait();
    slot.offset = offset;
    slot.bytes.resize(std::min(kRepairChunk, length - offset));
    auto read = transfer(from, "read", offset, slot.bytes.size());
    from.channel->get(*source_segment, offset, slot.bytes.data(), slot.bytes.size(), read->completion);
    slot.read = Request(read);
  }
  for (auto& slot : ring)
    if (slot.read.valid()) write_out(slot);
  for (auto& slot : ring)
    if (slot.write.valid()) slot.write.wait();
  to.control->call(MessageType::set_version, {{"name", target_name}, {"version", version}});
  return length;
}

}  // namespace smb
