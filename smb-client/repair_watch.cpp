// A client's side of online repair (docs/reliability.md, "Repair"; the
// server's side: smb-server/repair_pauses.hpp).
//
// Every open of a replicated buffer holds its layout record at its keepers
// (the home and the next server). For each keeper where it holds some, the
// client runs a watcher thread on a connection of its own, long-polling
// watch_repairs. A hold dies with its session: when a keeper is lost, its
// watcher waits for it to come back with the record (a repair writes it
// back) and holds there again, so that the holds follow the record from
// keeper to keeper through any number of losses, one at a time (a repair
// that finds a client with its copy open whom no keeper paused refuses to
// finish: repair.cpp). When a
// repair is about to make its final copy, the watch answers with the
// buffer's name: the watcher closes the gates of this client's Buffers of
// that name (op_gate.hpp), waits for their writes in flight, and acks; the
// ack is answered when the repair ends, with the layout it left, which the
// Buffers adopt (opening the rebuilt copies) before their gates open again.
// The watch also brings news of copies another client recorded stale.
#include "client_core.hpp"

#include "protocol/layout_codec.hpp"
#include "protocol/segment_codec.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <thread>

namespace smb {

using protocol::Body;
using protocol::MessageType;

namespace {
// How long a watch waits at the server before it is asked again.
constexpr std::chrono::milliseconds kWatchWait{5'000};
// How long an ack may wait for the repair's end: the final copy of a
// large buffer, with a margin. A repairer that dies ends it at once.
constexpr std::chrono::minutes kAckWait{30};
// The longest wait between attempts to hold again at a keeper that was lost.
constexpr std::chrono::milliseconds kHoldAgainAtMost{500};
}  // namespace

ClientCore::HoldTicket::HoldTicket(ClientCore& client, std::string name) : client_(client), name_(std::move(name)) {
  std::lock_guard lock(client_.held_mutex_);
  client_.held_[name_].opening += 1;
}

ClientCore::HoldTicket::~HoldTicket() {
  if (finished_) return;
  {
    std::lock_guard lock(client_.held_mutex_);
    auto it = client_.held_.find(name_);
    if (--it->second.opening == 0 && it->second.buffers.empty() && it->second.pausing == 0) client_.held_.erase(it);
  }
  client_.release_at(name_, held_at_);
}

void ClientCore::release_at(const std::string& name, const HeldAt& held_at) {
  for (const auto& [keeper, held_by] : held_at) {
    try {
      auto& l = link(keeper);
      if (&l != held_by) continue;  // relinked since: the hold ended with the old session
      l.control->call(MessageType::release_layout, {{"name", name}});
    } catch (const Error&) {
      // The keeper closing our session (or going) releases it too.
    }
  }
}

bool ClientCore::has_open(const std::string& name) {
  std::lock_guard lock(held_mutex_);
  const auto it = held_.find(name);
  return it != held_.end() && std::any_of(it->second.buffers.begin(), it->second.buffers.end(),
                                          [](const auto& b) { return !b.buffer.expired(); });
}

// The layout comes from the home (or the next keeper, where the home has
// no record); a replicated buffer is then held by every keeper that has its
// record, so that a repair reaches this client through either.
Body ClientCore::hold_record(const std::string& name, HoldTicket& ticket) {
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  for (;;) {
    auto [reply, first] = ask_keepers(name, MessageType::hold_layout, {{"name", name}});
    bool repairing = reply.contains("repairing");
    if (!repairing && reply.contains("held")) {
      ticket.held_at_ = {{first, &link(first)}};
      for (const auto& other : keepers_of(name)) {
        if (other == first) continue;
        try {
          auto& l = link(other);
          const auto also = l.control->call(MessageType::hold_layout, {{"name", name}});
          if (also.contains("held")) ticket.held_at_[other] = &l;
          repairing = repairing || also.contains("repairing");
        } catch (const Error& e) {
          if (!client::is_absence(e) && e.code() != Errc::not_found) throw;  // gone, or restarted without the record
        }
      }
      if (repairing) {  // a pause began at the other keeper: wait for its end, like one here
        release_at(name, ticket.held_at_);
        ticket.held_at_.clear();
      }
    }
    if (!repairing) {
      // A keeper that holds nothing for us (gone, or without the record):
      // its watcher holds there once it can (hold_again).
      if (ticket.held())
        for (const auto& keeper : keepers_of(name)) start_watcher(keeper);
      return reply;
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw Error(Errc::busy, "open buffer '" + name + "': a repair (smbctl repair) was making its final copy for " +
                                  std::to_string(options_.timeout.count()) + " ms; retry when it ends");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void ClientCore::finish_hold(HoldTicket& ticket, const std::shared_ptr<BufferCore>& buffer, const Layout& held_layout) {
  std::optional<Layout> newer;
  bool paused = false;
  {
    std::lock_guard lock(held_mutex_);
    auto& held = held_[ticket.name_];
    held.opening -= 1;
    held.buffers.push_back({buffer.get(), buffer, ticket.held_at_});
    ticket.finished_ = true;
    if (held.latest && held.latest->instances != held_layout.instances) newer = held.latest;
    paused = held.pausing > 0;
  }
  // A pause that began meanwhile: nothing of this buffer is in flight yet.
  if (paused) buffer->gate().pause(std::chrono::steady_clock::now(), [] {}, [](client::ServerLink*) { return true; });
  if (newer) buffer->adopt(*newer);
  // The pause may have ended before the gate closed: open it unless one runs.
  std::lock_guard lock(held_mutex_);
  if (paused && held_[ticket.name_].pausing == 0) buffer->gate().resume();
}

void ClientCore::release_held(const BufferCore* buffer, const std::string& name) {
  HeldAt held_at;
  {
    std::lock_guard lock(held_mutex_);
    auto it = held_.find(name);
    if (it == held_.end()) return;
    auto& opens = it->second.buffers;
    if (auto mine = std::find_if(opens.begin(), opens.end(), [&](const auto& b) { return b.raw == buffer; });
        mine != opens.end())
      held_at = mine->held_at;
    std::erase_if(opens, [&](const auto& b) { return b.raw == buffer || b.buffer.expired(); });
    if (opens.empty() && it->second.opening == 0 && it->second.pausing == 0) held_.erase(it);
  }
  release_at(name, held_at);
}

void ClientCore::start_watcher(const std::string& keeper) {
  std::lock_guard lock(held_mutex_);
  auto& watcher = watchers_[keeper];
  if (watcher.running) return;
  if (watcher.thread.joinable()) watcher.thread.join();  // it said it ends: it has, or is about to
  watcher.running = true;
  watcher.thread = std::thread(&ClientCore::watch_keeper, weak_from_this(), keeper);
}

// The thread keeps only a weak hold on the client, and none while it waits,
// so that dropping the last Buffer ends the client (and this thread) at once.
void ClientCore::watch_keeper(std::weak_ptr<ClientCore> weak, std::string keeper) {
  // Its own reference to the logger: spdlog's registry (and the default
  // logger's pointer in it) goes with the process's statics, and an ASan run
  // saw this thread log after they were gone (a test process ending, after
  // a failed test, while this thread still ran).
  const auto log = spdlog::default_logger();
  std::shared_ptr<client::ControlConnection> connection;
  std::uint64_t holder = 0;
  for (;;) {
    Body reply;
    bool gone = false;
    try {
      {
        auto self = weak.lock();
        if (!self) return;
        auto& l = self->link(keeper);
        holder = l.control->session();
        if (!connection) connection = l.waits->acquire();
      }
      reply = connection->call(MessageType::watch_repairs,
                               {{"holder", holder}, {"timeout_ms", static_cast<std::uint64_t>(kWatchWait.count())}},
                               kWatchWait);
    } catch (const Error& e) {
      // The keeper is gone, and our holds there with it: no repair can pause us now.
      log->debug("repair watch on {} ends: {}", keeper, e.what());
      gone = true;
    }
    auto self = weak.lock();
    if (!self) return;
    if (reply.contains("name")) {
      try {
        self->answer_pause(keeper, *connection, holder, reply);
      } catch (const Error& e) {
        log->warn("answering a repair's pause of '{}' on {}: {}", reply.value("name", std::string()), keeper, e.what());
      }
      continue;
    }
    if (reply.contains("stale")) {  // another client recorded a copy stale: ours leave it too
      try {
        const auto layout = protocol::layout_from_body(reply.at("layout"), "watch_repairs");
        std::vector<std::shared_ptr<BufferCore>> buffers;
        {
          std::lock_guard lock(self->held_mutex_);
          if (auto it = self->held_.find(layout.name); it != self->held_.end())
            for (const auto& open : it->second.buffers)
              if (auto b = open.buffer.lock()) buffers.push_back(std::move(b));
        }
        for (const auto& buffer : buffers) buffer->learn_stale(layout.stale);
      } catch (const Error& e) {
        log->warn("repair watch on {}: news of a stale copy: {}", keeper, e.what());
      }
      continue;
    }
    if (!gone && !reply.contains("stop")) continue;
    // The keeper went (and our holds there with it), or says we hold
    // nothing there: what should be held here is held again once it can be.
    // (A keeper that restarted reset our connection to it, which the link
    // sees at once or a moment later; a stop can also race a close and an
    // open of ours: the next watch tells.)
    connection.reset();
    self.reset();  // not kept while waiting
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!hold_again(weak, keeper)) return;
  }
}

bool ClientCore::hold_again(const std::weak_ptr<ClientCore>& weak, const std::string& keeper) {
  auto wait = std::chrono::milliseconds(10);  // an open that raced a stop holds in a moment
  for (;;) {
    {
      auto self = weak.lock();
      if (!self) return false;
      switch (self->try_hold_again(keeper)) {
        case Rehold::held:
          return true;
        case Rehold::nothing_to_hold:
          return false;
        case Rehold::later:
          break;
      }
    }
    std::this_thread::sleep_for(wait);
    wait = std::min(wait * 2, kHoldAgainAtMost);
  }
}

// Which opens lack a live hold at `keeper` is told by the link that holds:
// a hold made on a link that died (the keeper restarted, the connection
// broke) ended with its session. A hold is never taken twice on one
// session: one that leaked would be a holder nobody answers for, and every
// later repair's pause would wait for it in vain.
ClientCore::Rehold ClientCore::try_hold_again(const std::string& keeper) {
  const auto live_link = [&]() -> client::ServerLink* {
    try {
      auto& l = link(keeper);
      return l.alive() ? &l : nullptr;  // alive(): a closed peer fails the channel for every op too
    } catch (const Error&) {
      return nullptr;
    }
  };
  // Per name, its opens without a hold on `current`; whether some open has
  // one; whether an open is on its way (it holds by itself).
  struct Lacking {
    std::map<std::string, std::size_t> names;
    bool held = false, opening = false;
  };
  const auto lacking = [&](const client::ServerLink* current) {
    Lacking out;
    for (const auto& [name, held] : held_) {
      const auto keepers = keepers_of(name);
      if (std::find(keepers.begin(), keepers.end(), keeper) == keepers.end()) continue;
      out.opening = out.opening || held.opening > 0;
      for (const auto& open : held.buffers) {
        if (open.buffer.expired()) continue;
        const auto at = open.held_at.find(keeper);
        if (current != nullptr && at != open.held_at.end() && at->second == current)
          out.held = true;
        else
          ++out.names[name];
      }
    }
    return out;
  };
  {
    auto* current = live_link();
    std::lock_guard lock(held_mutex_);
    const auto now = lacking(current);
    if (now.names.empty() && !now.opening) {
      if (!now.held) watchers_[keeper].running = false;  // its thread ends now
      return now.held ? Rehold::held : Rehold::nothing_to_hold;
    }
    if (now.names.empty()) return Rehold::later;  // an open on its way holds here in a moment
  }
  client::ServerLink* l = nullptr;
  try {
    l = &relink(keeper);
  } catch (const Error&) {
    return Rehold::later;  // still gone
  }
  std::map<std::string, std::size_t> wanted;
  {
    std::lock_guard lock(held_mutex_);
    wanted = lacking(l).names;
  }
  bool all = true;
  for (const auto& [name, count] : wanted) {
    std::size_t got = 0;
    try {
      for (; got < count; ++got) {
        const auto reply = l->control->call(MessageType::hold_layout, {{"name", name}});
        if (!reply.contains("held")) break;  // a repair's pause runs here: after it
      }
    } catch (const Error& e) {
      // not_found: the keeper came back without the record, which a repair writes back
      if (e.code() != Errc::not_found) spdlog::debug("holding '{}' at {} again: {}", name, keeper, e.what());
    }
    all = all && got == count;
    std::size_t extra = got;
    {
      std::lock_guard lock(held_mutex_);
      if (auto it = held_.find(name); it != held_.end())
        for (auto& open : it->second.buffers) {
          if (extra == 0) break;
          const auto at = open.held_at.find(keeper);
          if (open.buffer.expired() || (at != open.held_at.end() && at->second == l)) continue;
          open.held_at[keeper] = l;
          --extra;
        }
    }
    for (; extra > 0; --extra) release_at(name, {{keeper, l}});  // closed meanwhile
    if (got > 0) spdlog::info("buffer '{}': held again at {}, which came back", name, keeper);
  }
  return all ? Rehold::held : Rehold::later;
}

// Pauses this client's Buffers of the buffer the watch named, acks once
// their writes have landed, and adopts the layout the repair leaves.
// Where they do not drain in time there is no ack: the repair's pause
// fails, and a later repair tries again.
void ClientCore::answer_pause(const std::string& keeper, client::ControlConnection& connection, std::uint64_t holder,
                              const Body& ask) {
  const auto name = protocol::get_name(ask, "name", "watch_repairs");
  const auto epoch = protocol::get_u64(ask, "epoch", "watch_repairs");
  const auto live = [&] {
    std::vector<std::shared_ptr<BufferCore>> out;
    std::lock_guard lock(held_mutex_);
    for (const auto& open : held_[name].buffers)
      if (auto b = open.buffer.lock()) out.push_back(std::move(b));
    return out;
  };
  {
    std::lock_guard lock(held_mutex_);
    held_[name].pausing += 1;
  }
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  bool drained = true;
  auto paused = live();
  for (const auto& buffer : paused)
    drained = buffer->gate().pause(
                  deadline, [this] { transport_->progress(); },
                  [](client::ServerLink* l) { return l == nullptr || !l->alive(); }) &&
              drained;
  std::optional<Layout> layout;
  if (drained) {
    try {
      auto reply = connection.call(MessageType::ack_pause, {{"holder", holder}, {"name", name}, {"epoch", epoch}},
                                   kAckWait);
      layout = protocol::layout_from_body(reply.at("layout"), "ack_pause");
    } catch (const Error& e) {
      spdlog::warn("buffer '{}': a repair's pause on {} ended without its layout: {}", name, keeper, e.what());
    }
  } else {
    spdlog::warn("buffer '{}': its writes in flight did not land within {} ms; the repair's pause is refused", name,
                 options_.timeout.count());
  }
  if (layout) {
    {
      std::lock_guard lock(held_mutex_);
      held_[name].latest = layout;
    }
    for (const auto& buffer : live()) {
      try {
        buffer->adopt(*layout);
      } catch (const Error& e) {
        spdlog::warn("buffer '{}': the copies a repair rebuilt cannot be opened: {}", name, e.what());
      }
    }
  }
  bool last = false;  // the buffer's other keeper may pause it for the same repair: the last one resumes
  {
    std::lock_guard lock(held_mutex_);
    last = --held_[name].pausing == 0;
  }
  if (last)
    for (const auto& buffer : live()) buffer->gate().resume();
  std::lock_guard lock(held_mutex_);
  if (auto it = held_.find(name); it != held_.end()) {  // every Buffer of it may have closed meanwhile
    std::erase_if(it->second.buffers, [](const auto& b) { return b.buffer.expired(); });
    if (it->second.buffers.empty() && it->second.opening == 0 && it->second.pausing == 0) held_.erase(it);
  }
}

void ClientCore::refresh_links(const Layout& layout, bool every_dead) {
  for (std::size_t i = 0; i < layout.servers.size(); ++i) {
    client::ServerLink* l = nullptr;
    try {
      l = &link(layout.servers[i]);
    } catch (const Error&) {
    }
    const bool dead = l == nullptr || l->control->broken() || l->control->peer_closed();
    if (!dead) continue;
    // Without `every_dead`, only where the layout names a run our dead link
    // did not know (the server restarted and was repaired): a server that
    // is down would cost every open a connection attempt.
    if (!every_dead && (l == nullptr || i >= layout.instances.size() || layout.instances[i] == l->instance)) continue;
    try {
      relink(layout.servers[i]);
    } catch (const Error& e) {
      spdlog::debug("buffer '{}': server {} still cannot be reached: {}", layout.name, layout.servers[i], e.what());
    }
  }
}

void BufferCore::adopt(const Layout& layout) {
  if (layout.servers != layout_.servers || layout.replicas != layout_.replicas)
    throw Error(Errc::protocol, "buffer '" + layout_.name + "': a repair left a layout of other servers or copies");
  std::lock_guard adopting(adopt_mutex_);
  for (std::uint32_t i = 0; i < server_count(); ++i) {
    {
      std::lock_guard lock(segments_mutex_);
      if (i >= layout.instances.size() || i >= layout_.instances.size() || layout.instances[i] == layout_.instances[i])
        continue;
    }
    auto& l = client_->relink(layout_.servers[i]);
    if (l.instance != layout.instances[i]) {
      spdlog::warn("buffer '{}': server {} restarted again since its repair; its copies stay unused",
                   layout_.name, layout_.servers[i]);
      continue;
    }
    for (std::uint32_t r = 0; r < replicas(); ++r) {
      if (ClientCore::copy_share(layout, r, i) == 0) continue;
      auto reply = l.control->call(protocol::MessageType::open_segment, {{"name", segment_names_[r]}});
      auto opened = l.channel->attach(protocol::segment_from(reply, "open_segment"));
      {
        std::lock_guard lock(segments_mutex_);
        segments_[std::size_t{r} * server_count() + i].store(opened.get(), std::memory_order_release);
        owned_segments_.push_back(std::move(opened));
      }
      path_->copy_reopened(r, i);  // after its segment is in place: it is used from here on
    }
    links_[i].store(&l, std::memory_order_release);
    std::lock_guard lock(segments_mutex_);
    layout_.instances[i] = layout.instances[i];
  }
  path_->adopted(layout);
  std::lock_guard lock(segments_mutex_);
  layout_.stale = layout.stale;
}

}  // namespace smb
