// A client's side of online repair (docs/reliability.md, "Repair"; the
// server's side: smb-server/repair_pauses.hpp).
//
// Every open of a replicated buffer holds its layout record at the home
// server. For each home where it holds some, the client runs a watcher
// thread on a connection of its own, long-polling watch_repairs. When a
// repair is about to make its final copy, the watch answers with the
// buffer's name: the watcher closes the gates of this client's Buffers of
// that name (op_gate.hpp), waits for their writes in flight, and acks; the
// ack is answered when the repair ends, with the layout it left, which the
// Buffers adopt (opening the rebuilt copies) before their gates open again.
#include "client_core.hpp"

#include "protocol/layout_codec.hpp"

#include <spdlog/spdlog.h>

namespace smb {

using protocol::Body;
using protocol::MessageType;

namespace {
// How long a watch waits at the server before it is asked again.
constexpr std::chrono::milliseconds kWatchWait{5'000};
// How long an ack may wait for the repair's end: the final copy of a
// large buffer, with a margin. A repairer that dies ends it at once.
constexpr std::chrono::minutes kAckWait{30};
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
    if (--it->second.opening == 0 && it->second.buffers.empty() && !it->second.paused) client_.held_.erase(it);
  }
  if (!held_) return;
  try {
    client_.link(client_.home_of(name_)).control->call(MessageType::release_layout, {{"name", name_}});
  } catch (const Error&) {
    // The home closing our session releases it too.
  }
}

Body ClientCore::hold_record(const std::string& name, HoldTicket& ticket) {
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  for (;;) {
    auto reply = home_link(name).control->call(MessageType::hold_layout, {{"name", name}});
    if (!reply.contains("repairing")) {
      ticket.held_ = reply.contains("held");
      if (ticket.held_) start_watcher(home_of(name));
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
    held.buffers.emplace_back(buffer.get(), buffer);
    ticket.finished_ = true;
    if (held.latest && held.latest->instances != held_layout.instances) newer = held.latest;
    paused = held.paused;
  }
  buffer->set_held();
  // A pause that began meanwhile: nothing of this buffer is in flight yet.
  if (paused) buffer->gate().pause(std::chrono::steady_clock::now(), [] {}, [](client::ServerLink*) { return true; });
  if (newer) buffer->adopt(*newer);
  // The pause may have ended before the gate closed: open it unless one runs.
  std::lock_guard lock(held_mutex_);
  if (paused && !held_[ticket.name_].paused) buffer->gate().resume();
}

void ClientCore::release_held(const BufferCore* buffer, const std::string& name) {
  {
    std::lock_guard lock(held_mutex_);
    auto it = held_.find(name);
    if (it != held_.end()) {
      std::erase_if(it->second.buffers, [&](const auto& b) { return b.first == buffer || b.second.expired(); });
      if (it->second.buffers.empty() && it->second.opening == 0 && !it->second.paused) held_.erase(it);
    }
  }
  try {
    link(home_of(name)).control->call(MessageType::release_layout, {{"name", name}});
  } catch (const Error&) {
    // The home closing our session releases it too.
  }
}

void ClientCore::start_watcher(const std::string& home) {
  std::lock_guard lock(held_mutex_);
  auto& watcher = watchers_[home];
  if (watcher.running) return;
  if (watcher.thread.joinable()) watcher.thread.join();  // it said it ends: it has, or is about to
  watcher.running = true;
  watcher.thread = std::thread(&ClientCore::watch_home, weak_from_this(), home);
}

// The thread keeps only a weak hold on the client, and none while it waits,
// so that dropping the last Buffer ends the client (and this thread) at once.
void ClientCore::watch_home(std::weak_ptr<ClientCore> weak, std::string home) {
  std::shared_ptr<client::ControlConnection> connection;
  std::uint64_t holder = 0;
  for (;;) {
    Body reply;
    try {
      {
        auto self = weak.lock();
        if (!self) return;
        auto& l = self->link(home);
        holder = l.control->session();
        if (!connection) connection = l.waits->acquire();
      }
      reply = connection->call(MessageType::watch_repairs,
                               {{"holder", holder}, {"timeout_ms", static_cast<std::uint64_t>(kWatchWait.count())}},
                               kWatchWait);
    } catch (const Error& e) {
      // The home is gone, and our holds with it: no repair can pause us now.
      spdlog::debug("repair watch on {} ends: {}", home, e.what());
      reply = Body{{"stop", true}};
    }
    auto self = weak.lock();
    if (!self) return;
    if (reply.contains("name")) {
      try {
        self->answer_pause(home, *connection, holder, reply);
      } catch (const Error& e) {
        spdlog::warn("answering a repair's pause of '{}' on {}: {}", reply.value("name", std::string()), home, e.what());
      }
      continue;
    }
    if (!reply.contains("stop")) continue;
    {
      std::lock_guard lock(self->held_mutex_);
      bool holds_here = false;
      for (const auto& [name, held] : self->held_) holds_here = holds_here || self->home_of(name) == home;
      if (!holds_here || connection->broken()) {
        self->watchers_[home].running = false;
        return;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // an open that raced the stop holds in a moment
  }
}

// Pauses this client's Buffers of the buffer the watch named, acks once
// their writes have landed, and adopts the layout the repair leaves.
// Returns false where they did not drain in time (no ack: the repair's
// pause fails and it retries later).
bool ClientCore::answer_pause(const std::string& home, client::ControlConnection& connection, std::uint64_t holder,
                              const Body& ask) {
  const auto name = protocol::get_name(ask, "name", "watch_repairs");
  const auto epoch = protocol::get_u64(ask, "epoch", "watch_repairs");
  const auto live = [&] {
    std::vector<std::shared_ptr<BufferCore>> out;
    std::lock_guard lock(held_mutex_);
    for (const auto& [raw, weak] : held_[name].buffers)
      if (auto b = weak.lock()) out.push_back(std::move(b));
    return out;
  };
  {
    std::lock_guard lock(held_mutex_);
    held_[name].paused = true;
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
      spdlog::warn("buffer '{}': a repair's pause on {} ended without its layout: {}", name, home, e.what());
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
  {
    std::lock_guard lock(held_mutex_);
    held_[name].paused = false;
  }
  for (const auto& buffer : live()) buffer->gate().resume();
  std::lock_guard lock(held_mutex_);
  if (auto it = held_.find(name); it != held_.end()) {  // every Buffer of it may have closed meanwhile
    std::erase_if(it->second.buffers, [](const auto& b) { return b.second.expired(); });
    if (it->second.buffers.empty() && it->second.opening == 0) held_.erase(it);
  }
  return drained;
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
      std::lock_guard lock(stale_mutex_);
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
      auto opened = l.channel->attach(client::segment_from(reply, "open_segment"));
      std::lock_guard lock(stale_mutex_);
      segments_[std::size_t{r} * server_count() + i].store(opened.get(), std::memory_order_release);
      owned_segments_.push_back(std::move(opened));
      stale_.erase({r, i});
    }
    links_[i].store(&l, std::memory_order_release);
    std::lock_guard lock(stale_mutex_);
    layout_.instances[i] = layout.instances[i];
  }
}

}  // namespace smb
