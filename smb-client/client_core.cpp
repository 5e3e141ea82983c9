#include "client_core.hpp"

#include "protocol/auth.hpp"

#include "transport/registry.hpp"

#include "protocol/layout_codec.hpp"
#include "protocol/segment_codec.hpp"
#include "protocol/striping.hpp"
#include "util/parse.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

namespace smb {

using protocol::Body;
using protocol::MessageType;

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

// libsmb logs through spdlog's default logger, which writes to stdout until
// the program installs its own (smbd and the tools do): a Python or C
// program's output would get our warnings mixed in. Until then, stderr.
void log_to_stderr_unless_set() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (spdlog::default_logger()->name().empty())  // spdlog's own, untouched
      spdlog::set_default_logger(spdlog::stderr_color_mt("smb"));
  });
}

}  // namespace

bool client::is_absence(const Error& e) {
  return e.code() == Errc::unreachable || e.code() == Errc::server_gone || e.code() == Errc::timeout;
}

using client::is_absence;
using protocol::segment_from;

ClientCore::ClientCore(ClientOptions options) : options_(std::move(options)) {
  log_to_stderr_unless_set();
  if (options_.servers.empty()) {
    const char* env = std::getenv("SMB_SERVERS");
    if (env == nullptr || *env == '\0')
      throw Error(Errc::invalid_argument,
                  "no memory servers given: pass them explicitly or set SMB_SERVERS=host:port,host:port");
    options_.servers = parse_server_list(env);
  }
  for (auto& s : options_.servers) s = util::parse_host_port(s).str();
  if (options_.timeout.count() <= 0) throw Error(Errc::invalid_argument, "client timeout must be positive");
  if (options_.transport.empty()) options_.transport = env_or("SMB_TRANSPORT", "ucx");
  if (options_.auth_token_file.empty()) options_.auth_token_file = env_or("SMB_AUTH_TOKEN_FILE", "");
  if (!options_.auth_token_file.empty())
    auth_ = protocol::ClientAuth::from_file(options_.auth_token_file, "SMB_AUTH_TOKEN_FILE / auth_token_file");
  sorted_servers_ = options_.servers;
  std::sort(sorted_servers_.begin(), sorted_servers_.end());
  sorted_servers_.erase(std::unique(sorted_servers_.begin(), sorted_servers_.end()), sorted_servers_.end());
  transport_ = transport::make_client_transport(options_.transport, options_.transport_options);
  // A server that is down (killed, not yet restarted) does not stop the
  // client: a replicated buffer opens and works from its other copies, and
  // what needs that server fails at once, naming it. A client that reaches
  // none fails here, as does one that a server refuses (a wrong secret).
  std::vector<std::pair<std::string, Error>> failed;
  for (const auto& s : sorted_servers_) {
    try {
      link(s);
    } catch (const Error& e) {
      if (!is_absence(e)) throw;
      failed.emplace_back(s, e);
    }
  }
  // A server listed before the one whose hello said it was replaced: tried
  // again at its new address.
  std::erase_if(failed, [&](const auto& f) {
    std::unique_lock lock(links_mutex_);
    if (server_map_.resolve(f.first) == f.first) return false;
    unreachable_.erase(f.first);
    lock.unlock();
    try {
      link(f.first);
      return true;
    } catch (const Error& e) {
      if (!is_absence(e)) throw;
      return false;
    }
  });
  if (options_.tolerate_unreachable || failed.empty()) return;
  if (failed.size() == sorted_servers_.size())
    throw Error(failed.front().second.code(),
                std::string("no memory server could be reached: ") + failed.front().second.what());
  for (const auto& [server, e] : failed)
    spdlog::warn("server {} cannot be reached ({}): going on without it; buffers with a copy on other servers "
                 "still open, what needs it fails until it is back",
                 server, e.what());
}

ClientCore::~ClientCore() {
  // Every buffer is closed (each held the client), so each watcher has been
  // told to stop; one that is this thread (it dropped the last buffer) ends
  // by itself.
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(held_mutex_);
    for (auto& [home, watcher] : watchers_) threads.push_back(std::move(watcher.thread));
  }
  for (auto& thread : threads) {
    if (!thread.joinable()) continue;
    if (thread.get_id() == std::this_thread::get_id())
      thread.detach();
    else
      thread.join();
  }
  std::lock_guard lock(links_mutex_);
  for (auto& [name, l] : links_) l->channel.reset();  // before the transport goes
  for (auto& l : retired_links_) l->channel.reset();
}

// A server found unreachable is tried again once kRetryUnreachable has
// passed (it may be back), not by every call that needs it meanwhile.
client::ServerLink& ClientCore::link(const std::string& server) {
  std::lock_guard lock(links_mutex_);
  if (auto it = links_.find(server); it != links_.end()) return *it->second;
  const auto now = std::chrono::steady_clock::now();
  if (auto it = unreachable_.find(server); it != unreachable_.end() && now - it->second.since < kRetryUnreachable)
    throw Error(Errc::unreachable, it->second.why);
  try {
    auto& made = connect_or_replaced(server);
    unreachable_.erase(server);
    return made;
  } catch (const Error& e) {
    if (is_absence(e)) unreachable_.insert_or_assign(server, Unreachable{e.what(), now});
    throw;
  }
}

// Under links_mutex_.
client::ServerLink& ClientCore::connect_or_replaced(const std::string& server) {
  try {
    return connect(server);
  } catch (const Error& e) {
    // Lost for good and replaced since this client last heard? The servers
    // it reaches say so.
    if (!is_absence(e) || !refresh_server_map(server)) throw;
    return connect(server);
  }
}

// Under links_mutex_.
void ClientCore::learn_server_map(const Body& hello, const std::string& from) {
  auto it = hello.find("replaced");
  if (it == hello.end() || !server_map_.merge(*it, "hello of server " + from)) return;
  for (auto link = links_.begin(); link != links_.end();) {
    if (server_map_.resolve(link->first) == link->second->address) {
      ++link;
      continue;
    }
    spdlog::info("server {} is served at {} from now on (replaced)", link->first, server_map_.resolve(link->first));
    link = retire(link);
  }
}

// Under links_mutex_. Requests in flight may still name the link: it is kept.
ClientCore::Links::iterator ClientCore::retire(Links::iterator link) {
  retired_links_.push_back(std::move(link->second));
  return links_.erase(link);
}

// Under links_mutex_.
bool ClientCore::refresh_server_map(const std::string& server) {
  const auto before = server_map_.resolve(server);
  // A snapshot: learning may retire links (kept alive in retired_links_).
  std::vector<std::pair<std::string, client::ServerLink*>> linked;
  for (auto& [name, l] : links_) linked.emplace_back(name, l.get());
  for (auto& [name, l] : linked) {
    if (name == server || l->control->broken() || l->control->peer_closed()) continue;
    try {
      learn_server_map(l->control->call(MessageType::server_map, Body::object()), name);
    } catch (const Error& e) {
      spdlog::debug("server {}: no map of replaced servers ({})", name, e.what());
      continue;
    }
    if (server_map_.resolve(server) != before) return true;
  }
  return false;
}

std::string ClientCore::resolve(const std::string& slot) const {
  std::lock_guard lock(links_mutex_);
  return server_map_.resolve(slot);
}

protocol::ServerMap ClientCore::server_map() const {
  std::lock_guard lock(links_mutex_);
  return server_map_;
}

// Under links_mutex_.
client::ServerLink& ClientCore::connect(const std::string& server) {
  auto made = std::make_unique<client::ServerLink>();
  auto& l = *made;
  l.address = server_map_.resolve(server);
  l.control = std::make_unique<client::ControlConnection>(l.address, options_.timeout,
                                                          Body{{"client", "libsmb"},
                                                               {"id", id_},
                                                               {"transport", transport_->name()},
                                                               {"address", protocol::binary(transport_->address())}},
                                                          auth_);
  // The data channel presents the session's ticket: the server serves it
  // only while this control session is open (ChannelAdmission).
  const auto& hello = l.control->hello_reply();
  l.ticket = hello.contains("ticket") ? protocol::get_binary(hello, "ticket", "hello") : protocol::Bytes{};
  l.transport_address = protocol::get_binary(hello, "address", "hello");
  l.channel = transport_->connect(l.transport_address, server, l.ticket);
  if (hello.contains("instance")) l.instance = protocol::get_u64(hello, "instance", "hello");
  l.waits = std::make_unique<client::WaitConnections>(
      l.address, options_.timeout, Body{{"client", "libsmb-wait"}, {"id", id_}, {"transport", transport_->name()}},
      auth_);
  auto& kept = *links_.insert_or_assign(server, std::move(made)).first->second;
  learn_server_map(hello, server);
  // Its own hello says it was replaced (an old machine come back): the
  // replacement is connected instead, once.
  if (!links_.contains(server) && server_map_.resolve(server) != kept.address) return connect(server);
  return kept;
}

client::ServerLink& ClientCore::relink(const std::string& server) {
  std::lock_guard lock(links_mutex_);
  if (auto it = links_.find(server); it != links_.end()) {
    auto& l = *it->second;
    if (!l.control->broken() && !l.control->peer_closed() && !l.channel->failure() &&
        l.address == server_map_.resolve(server))
      return l;
    retire(it);
  }
  auto& fresh = connect_or_replaced(server);
  unreachable_.erase(server);
  return fresh;
}

const std::string& ClientCore::home_of(std::string_view name) const {
  return sorted_servers_[protocol::home_server_index(name, sorted_servers_)];
}

std::vector<std::string> ClientCore::keepers_of(std::string_view name) const {
  const auto n = sorted_servers_.size();
  const auto home = protocol::home_server_index(name, sorted_servers_);
  if (n == 1) return {sorted_servers_[home]};
  return {sorted_servers_[home], sorted_servers_[(home + 1) % n]};
}

namespace {
// The keepers' "no buffer named 'x'" (not "still being created").
bool mentions_no_buffer(const Error& e) { return std::string_view(e.what()).find("no buffer named") != std::string_view::npos; }
}  // namespace

// A name its keepers do not know: says which servers were asked, since the
// usual cause is another server list than the creator's (names are placed
// by hashing over the sorted list, so another list asks other keepers).
Error ClientCore::unknown_name(const std::string& name, const Error& at_keeper) const {
  const auto keepers = keepers_of(name);
  std::string asked = keepers[0] + (keepers.size() > 1 ? " and " + keepers[1] : "");
  std::string listed;
  for (const auto& s : sorted_servers_) listed += (listed.empty() ? "" : ",") + s;
  return Error(Errc::not_found,
               "no buffer named '" + name + "': its keeper" + (keepers.size() > 1 ? "s " : " ") + asked +
                   " (placed by the " + std::to_string(sorted_servers_.size()) + " server(s) this client lists: " +
                   listed + ") " + (keepers.size() > 1 ? "do" : "does") + " not have it. A buffer made by a client listing other servers is kept elsewhere: " +
                   "list the same servers as its creator (SMB_SERVERS / --servers); `smbctl ls` lists what these "
                   "servers hold [" + at_keeper.what() + "]");
}

std::pair<Body, std::string> ClientCore::ask_keepers(const std::string& name, MessageType type, const Body& request) {
  const auto keepers = keepers_of(name);
  try {
    return {home_link(name).control->call(type, request), keepers[0]};
  } catch (const Error& at_home) {
    // Not there: the home is gone, or restarted without the record.
    const bool unknown = at_home.code() == Errc::not_found && mentions_no_buffer(at_home);
    if (keepers.size() == 1 && unknown) throw unknown_name(name, at_home);
    if (keepers.size() == 1 || !(is_absence(at_home) || at_home.code() == Errc::not_found)) throw;
    try {
      return {link(keepers[1]).control->call(type, request), keepers[1]};
    } catch (const Error& next) {
      if (unknown && next.code() == Errc::not_found && mentions_no_buffer(next)) throw unknown_name(name, at_home);
      if (next.code() == Errc::not_found) throw at_home;
      if (is_absence(next))
        throw Error(at_home.code(), std::string(at_home.what()) + " (and its other keeper cannot be reached: " +
                                        next.what() + ")");
      throw;
    }
  }
}

std::shared_ptr<BufferCore> ClientCore::create(std::string_view name_view, std::uint64_t size,
                                               const BufferOptions& options) {
  const std::string name(name_view);
  protocol::validate_name(name);
  const std::string context = "create buffer '" + name + "'";
  if (size == 0) throw Error(Errc::invalid_argument, context + ": size must be greater than zero");
  if (options.stripe_unit == 0 || options.stripe_unit % 8 != 0)
    throw Error(Errc::invalid_argument, context + ": stripe unit " + std::to_string(options.stripe_unit) +
                                            " must be a positive multiple of 8");
  Layout layout{name, size, options.stripe_unit, {}, {}, {}, 1, {}};
  if (options.servers.empty()) {
    layout.servers = sorted_servers_;
  } else {
    for (const auto& s : options.servers) layout.servers.push_back(util::parse_host_port(s).str());
  }
  if (layout.servers.size() > protocol::kMaxServersPerBuffer)
    throw Error(Errc::invalid_argument, context + ": " + std::to_string(layout.servers.size()) +
                                            " servers, at most " + std::to_string(protocol::kMaxServersPerBuffer));
  std::set<std::string> distinct;
  for (const auto& s : layout.servers)
    if (!distinct.insert(s).second) throw Error(Errc::invalid_argument, context + ": server " + s + " is named twice");
  protocol::StripeGeometry g{size, options.stripe_unit, static_cast<std::uint32_t>(layout.servers.size())};
  for (std::uint32_t i = 0; i < g.servers; ++i) layout.shares.push_back(g.share(i));
  if (const auto largest = *std::max_element(layout.shares.begin(), layout.shares.end());
      largest > protocol::kMaxServerCapacity)
    throw Error(Errc::no_space, context + ": " + util::format_bytes(size) + " over " +
                                    std::to_string(layout.servers.size()) + " server(s) needs " +
                                    util::format_bytes(largest) + " on one, more than any smbd lends (256 TiB)");

  if (options.replicas < 1 || options.replicas > kMaxReplicas || options.replicas > layout.servers.size())
    throw Error(Errc::invalid_argument, context + ": " + std::to_string(options.replicas) + " replicas over " +
                                            std::to_string(layout.servers.size()) + " server(s): 1 to " +
                                            std::to_string(kMaxReplicas) + ", each on its own server");
  layout.replicas = options.replicas;

  for (const auto& s : layout.servers) layout.instances.push_back(link(s).instance);
  // A replicated buffer's record is kept by both its keepers.
  const auto keepers = layout.replicas > 1 ? keepers_of(name) : std::vector<std::string>{home_of(name)};
  std::vector<std::string> reserved;
  const auto abandon = [&] {
    for (const auto& keeper : reserved) {
      try {
        link(keeper).control->call(MessageType::abandon_name, {{"name", name}});
      } catch (const Error&) {
      }
    }
  };
  try {
    for (const auto& keeper : keepers) {
      link(keeper).control->call(MessageType::reserve_name, {{"name", name}, {"layout", protocol::layout_to_body(layout)}});
      reserved.push_back(keeper);
    }
  } catch (const Error& e) {
    abandon();
    throw Error(e.code(), context + ": " + e.what());
  }
  std::vector<std::pair<std::string, std::string>> allocated;  // (server, segment)
  std::vector<transport::SegmentDescriptor> descriptors(layout.replicas * layout.servers.size());
  try {
    for (std::uint32_t r = 0; r < layout.replicas; ++r)
      for (std::size_t i = 0; i < layout.servers.size(); ++i) {
        const auto length = copy_share(layout, r, i);
        if (length == 0) continue;
        const auto segment = protocol::segment_name(name, r);
        auto reply = link(layout.servers[i]).control->call(MessageType::alloc_segment,
                                                            {{"name", segment}, {"length", length}});
        allocated.emplace_back(layout.servers[i], segment);
        descriptors[r * layout.servers.size() + i] = segment_from(reply, "alloc_segment");
      }
    for (const auto& keeper : keepers) link(keeper).control->call(MessageType::commit_layout, {{"name", name}});
  } catch (const Error& e) {
    // Undo: no half-created buffer may keep the name or the memory.
    for (const auto& [server, segment] : allocated) {
      try {
        // Close our handle first: a destroyed segment's memory returns only
        // once no handle is open on it.
        link(server).control->call(MessageType::close_segment, {{"name", segment}});
        link(server).control->call(MessageType::destroy, {{"name", segment}});
      } catch (const Error&) {
      }
    }
    abandon();
    throw Error(e.code(), context + ": " + e.what());
  }
  if (layout.replicas == 1) return attach(layout, descriptors);
  HoldTicket ticket(*this, name);
  auto buffer = attach(layout, descriptors);
  const auto held = hold_record(name, ticket);
  finish_hold(ticket, buffer, protocol::layout_from_body(held.at("layout"), "hold_layout"));
  return buffer;
}

std::uint64_t ClientCore::copy_share(const Layout& layout, std::uint32_t replica, std::size_t server) {
  const auto n = static_cast<std::uint32_t>(layout.servers.size());
  return layout.shares[protocol::copy_position(static_cast<std::uint32_t>(server), replica, n)];
}

std::shared_ptr<BufferCore> ClientCore::attach(const Layout& layout,
                                               const std::vector<transport::SegmentDescriptor>& descriptors) {
  const auto n = layout.servers.size();
  std::vector<std::unique_ptr<transport::RemoteSegment>> segments(layout.replicas * n);
  for (std::uint32_t r = 0; r < layout.replicas; ++r)
    for (std::size_t i = 0; i < n; ++i) {
      const auto length = copy_share(layout, r, i);
      const auto& d = descriptors[r * n + i];
      if (length == 0 || d.length == 0) continue;  // no share, or (replicated) a server that is gone
      if (d.length != length)
        throw Error(Errc::protocol, "server " + layout.servers[i] + ": segment of '" + layout.name + "' is " +
                                        std::to_string(d.length) + " bytes, its layout says " + std::to_string(length));
      segments[r * n + i] = link(layout.servers[i]).channel->attach(d);
    }
  return std::make_shared<BufferCore>(shared_from_this(), layout, std::move(segments));
}

// A replicated buffer's open holds its layout record (hold_layout, which
// waits while a repair pauses its holders): the repair then pauses this
// client too before its final copy, and the layout it leaves reaches the
// buffer (repair_watch.cpp).
std::shared_ptr<BufferCore> ClientCore::open(std::string_view name_view) {
  const std::string name(name_view);
  protocol::validate_name(name);
  HoldTicket ticket(*this, name);
  const auto reply = hold_record(name, ticket);
  const auto layout = protocol::layout_from_body(reply.at("layout"), "hold_layout");
  if (layout.replicas > 1) refresh_links(layout, false);
  std::vector<std::pair<std::string, std::string>> opened;  // (server, segment)
  const auto descriptors = open_segments(layout, opened);
  auto buffer = attach(layout, descriptors);
  if (ticket.held()) finish_hold(ticket, buffer, layout);
  return buffer;
}

std::vector<transport::SegmentDescriptor> ClientCore::open_segments(
    const Layout& layout, std::vector<std::pair<std::string, std::string>>& opened) {
  const std::string& name = layout.name;
  const auto n = layout.servers.size();
  // A replicated buffer opens without the servers that are gone or restarted
  // empty, as long as every stripe keeps a copy.
  std::vector<bool> present(n, true);
  if (layout.replicas == 1) {
    check_not_lost(layout, "open buffer '" + name + "'");
  } else {
    const auto states = check(layout);
    for (std::size_t i = 0; i < n; ++i) present[i] = states[i] == ShareState::ok;
    check_copies_left(layout, present, "open buffer '" + name + "'");
  }
  std::vector<transport::SegmentDescriptor> descriptors(layout.replicas * n);
  for (std::uint32_t r = 0; r < layout.replicas; ++r)
    for (std::size_t i = 0; i < n; ++i) {
      if (copy_share(layout, r, i) == 0 || !present[i]) continue;
      try {
        const auto segment = protocol::segment_name(name, r);
        auto reply = link(layout.servers[i]).control->call(MessageType::open_segment, {{"name", segment}});
        opened.emplace_back(layout.servers[i], segment);
        descriptors[r * n + i] = segment_from(reply, "open_segment");
      } catch (const Error& e) {
        if (layout.replicas == 1 || !is_absence(e)) throw;
        present[i] = false;
        check_copies_left(layout, present, "open buffer '" + name + "'");
      }
    }
  return descriptors;
}

void ClientCore::check_copies_left(const Layout& layout, const std::vector<bool>& present, const std::string& context) {
  const auto n = static_cast<std::uint32_t>(layout.servers.size());
  for (std::uint32_t p = 0; p < n; ++p) {
    if (layout.shares[p] == 0) continue;
    bool any = false;
    std::string where;
    for (std::uint32_t r = 0; r < layout.replicas; ++r) {
      const auto s = protocol::copy_server(p, r, n);
      const bool stale = protocol::is_stale(layout, {r, s});
      any = any || (present[s] && !stale);
      where += (r == 0 ? "" : ", ") + layout.servers[s] + (stale ? " (stale)" : "");
    }
    if (!any)
      throw Error(Errc::data_lost, context + ": lost: every copy of its stripes on " + where +
                                       " is gone (servers unreachable or restarted, or copies left behind)");
  }
}

void ClientCore::destroy(std::string_view name_view) {
  const std::string name(name_view);
  protocol::validate_name(name);
  const auto layout =
      protocol::layout_from_body(ask_keepers(name, MessageType::get_layout, {{"name", name}}).first["layout"], "get_layout");
  for (std::uint32_t r = 0; r < layout.replicas; ++r)
    for (std::size_t i = 0; i < layout.servers.size(); ++i) {
      if (copy_share(layout, r, i) == 0) continue;
      try {
        link(layout.servers[i]).control->call(MessageType::destroy, {{"name", protocol::segment_name(name, r)}});
      } catch (const Error& e) {
        // A replicated buffer's copies on a server that is gone went with it.
        if (e.code() != Errc::not_found && (layout.replicas == 1 || !is_absence(e))) throw;
      }
    }
  // The record, where its keepers hold no share (a keeper that is gone lost it already).
  for (const auto& keeper : layout.replicas > 1 ? keepers_of(name) : std::vector<std::string>{home_of(name)}) {
    try {
      link(keeper).control->call(MessageType::destroy, {{"name", name}});
    } catch (const Error& e) {
      if (e.code() != Errc::not_found && (layout.replicas == 1 || !is_absence(e))) throw;
    }
  }
}

namespace {
// Every page of a paged listing (stat, list_layouts) from one server.
template <class Each>
void each_page(client::ControlConnection& control, MessageType type, Each each) {
  std::string after;
  do {
    Body request = Body::object();
    if (!after.empty()) request["after"] = after;
    auto reply = control.call(type, request);
    each(reply);
    auto next = reply.find("next");
    const std::string following = next != reply.end() && next->is_string() ? next->get<std::string>() : std::string();
    if (!following.empty() && following <= after)
      throw Error(Errc::protocol, "server " + control.peer() + ": a listing's pages do not advance");
    after = following;
  } while (!after.empty());
}
}  // namespace

std::vector<ServerStatus> ClientCore::status() {
  std::vector<ServerStatus> out;
  for (const auto& s : sorted_servers_) {
    ServerStatus st;
    st.address = s;
    try {
      stat_of(s, st);
      if (auto at = resolve(s); at != s) st.served_at = at;
    } catch (const Error& e) {
      if (!is_absence(e)) throw;
      st = ServerStatus();
      st.address = s;
      st.reachable = false;
      st.error = e.what();
      note_unreachable(s, e);
    }
    out.push_back(std::move(st));
  }
  return out;
}

void ClientCore::note_unreachable(const std::string& server, const Error& e) {
  std::lock_guard lock(links_mutex_);
  if (!unreachable_.contains(server))
    unreachable_.emplace(server, Unreachable{e.what(), std::chrono::steady_clock::now()});
}

void ClientCore::stat_of(const std::string& s, ServerStatus& st) {
  bool first = true;
  each_page(*link(s).control, MessageType::stat, [&](const Body& r) {
    if (first) {
      if (r.contains("instance")) st.instance = protocol::get_u64(r, "instance", "stat");
      st.transport = protocol::get_string(r, "transport", "stat");
      st.capacity = protocol::get_u64(r, "capacity", "stat");
      st.used = protocol::get_u64(r, "used", "stat");
      st.largest_free = protocol::get_u64(r, "largest_free", "stat");
      st.huge_pages = protocol::get_bool(r, "huge_pages", "stat");
      // Servers before wire version 11 populated the pool before answering.
      st.populated = r.contains("populated") ? protocol::get_u64(r, "populated", "stat") : st.capacity;
      st.clients = static_cast<std::uint32_t>(protocol::get_u64(r, "clients", "stat"));
      if (r.contains("activity")) {  // servers before 0.1.0's metrics do not say
        const auto& a = r.at("activity");
        st.activity = ServerActivity{protocol::get_u64(a, "requests", "stat"),
                                     protocol::get_u64(a, "errors", "stat"),
                                     protocol::get_u64(a, "vector_ops", "stat"),
                                     protocol::get_u64(a, "vector_bytes", "stat"),
                                     protocol::get_u64(a, "transport_bytes_written", "stat"),
                                     protocol::get_u64(a, "transport_bytes_read", "stat")};
      }
      if (r.contains("waiting")) {  // servers before 0.1.0 of 2026-11-27 do not say
        const auto& w = r.at("waiting");
        st.waiting = ServerWaits{protocol::get_u64(w, "versions", "stat"), protocol::get_u64(w, "barrier_parties", "stat"),
                                 protocol::get_u64(w, "locks", "stat")};
      }
      first = false;
    }
    for (const auto& b : r.value("buffers", Body::array()))
      st.buffers.push_back(BufferSummary{protocol::get_string(b, "name", "stat"), protocol::get_u64(b, "bytes", "stat"),
                                         static_cast<std::uint32_t>(protocol::get_u64(b, "open_handles", "stat"))});
  });
}

std::vector<Layout> ClientCore::list() {
  std::map<std::string, Layout> by_name;  // a replicated buffer's record is kept twice: the home's wins
  for (const auto& s : sorted_servers_) {
    std::vector<Layout> kept;
    try {
      each_page(*link(s).control, MessageType::list_layouts, [&](const Body& r) {
        for (const auto& l : r.value("layouts", Body::array())) kept.push_back(protocol::layout_from_body(l, "list"));
      });
    } catch (const Error& e) {
      if (!is_absence(e)) throw;
      note_unreachable(s, e);
      continue;
    }
    for (auto& l : kept)
      if (!by_name.contains(l.name) || home_of(l.name) == s) by_name[l.name] = std::move(l);
  }
  std::vector<Layout> out;
  for (auto& [name, l] : by_name) out.push_back(std::move(l));
  return out;
}

// A keeper that restarted (relinked here) without the record is asked
// again after the others: a repair writing the record back to it copies
// the marks the other keeper has by then (restore_records), so the mark
// reaches it one way or the other.
Body ClientCore::stale_mark(const std::string& name, CopyRef copy, const std::string& why) {
  return {{"name", name}, {"copy", copy.replica}, {"server", copy.server}, {"why", why}};
}

bool ClientCore::record_stale(const std::string& name, CopyRef copy, const std::string& why) {
  const Body request = stale_mark(name, copy, why);
  std::optional<Error> failure;
  bool recorded = false;
  std::vector<std::string> without;  // keepers that had no record
  const auto mark = [&](const std::string& keeper) {
    try {
      relink(keeper).control->call(MessageType::mark_stale, request);
      return true;
    } catch (const Error& e) {
      if (e.code() == Errc::data_lost) throw;
      if (e.code() == Errc::not_found)
        without.push_back(keeper);  // restarted without it
      else if (!failure)
        failure = e;
      return false;
    }
  };
  for (const auto& keeper : keepers_of(name)) recorded = mark(keeper) || recorded;
  if (recorded)
    for (const auto& keeper : std::vector(without)) mark(keeper);
  if (!recorded)
    spdlog::warn("buffer '{}': copy {} on server {} could not be recorded as behind at its keepers{}{}", name,
                 copy.replica, copy.server, failure ? ": " : "", failure ? failure->what() : "");
  return recorded;
}

std::vector<CopyRef> ClientCore::recorded_stale(const std::string& name) { return info(name).stale; }

Layout ClientCore::info(std::string_view name_view) {
  const std::string name(name_view);
  protocol::validate_name(name);
  return protocol::layout_from_body(ask_keepers(name, MessageType::get_layout, {{"name", name}}).first["layout"],
                                    "get_layout");
}

client::ServerLink& ClientCore::home_link(const std::string& name) {
  const auto& home = home_of(name);
  try {
    return link(home);
  } catch (const Error& e) {
    if (e.code() != Errc::unreachable) throw;
    throw Error(e.code(), "buffer '" + name + "': its layout is kept by its home server " + home +
                              ", which cannot be reached: " + e.what());
  }
}

std::vector<ShareState> ClientCore::check(const Layout& layout) {
  std::vector<ShareState> out;
  for (std::size_t i = 0; i < layout.servers.size(); ++i) {
    client::ServerLink* l = nullptr;
    try {
      l = &link(layout.servers[i]);
    } catch (const Error&) {
      out.push_back(ShareState::unreachable);
      continue;
    }
    if (l->control->broken() || l->control->peer_closed())
      out.push_back(ShareState::unreachable);
    else if (i < layout.instances.size() && layout.instances[i] != 0 && layout.instances[i] != l->instance)
      out.push_back(ShareState::restarted);
    else
      out.push_back(ShareState::ok);
  }
  return out;
}

void ClientCore::check_not_lost(const Layout& layout, const std::string& context) {
  const auto states = check(layout);
  for (std::size_t i = 0; i < states.size(); ++i)
    if (states[i] == ShareState::restarted && layout.shares[i] > 0)
      throw Error(Errc::data_lost, context + ": lost: server " + layout.servers[i] +
                                       " restarted since the buffer was made; its stripes of this buffer (" +
                                       util::format_bytes(layout.shares[i]) + ") are gone");
}

std::map<std::string, std::string> ClientCore::unreachable_servers() const {
  std::lock_guard lock(links_mutex_);
  std::map<std::string, std::string> out;
  for (const auto& [server, why] : unreachable_) out.emplace(server, why.why);
  return out;
}

std::vector<std::string> ClientCore::describe_paths() {
  std::lock_guard lock(links_mutex_);
  std::vector<std::string> out;
  for (const auto& [server, l] : links_) out.push_back(server + ": " + l->channel->describe());
  return out;
}

}  // namespace smb
