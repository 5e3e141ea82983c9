#include "request_handler.hpp"

#include "host/findings_codec.hpp"
#include "protocol/layout_codec.hpp"
#include "protocol/segment_codec.hpp"
#include "util/parse.hpp"

#include <spdlog/spdlog.h>

#include <chrono>

namespace smb::server {

using protocol::Body;

namespace {

// Paging of listings: {after: NAME, limit: N} -> {ITEMS: [...], next: NAME}
// ("next" only when more follow).
std::string page_after(const Body& req, const char* what) {
  if (!req.contains("after")) return {};
  auto after = protocol::get_string(req, "after", what);
  if (after.size() > protocol::kMaxNameLength)
    throw Error(Errc::invalid_argument, std::string(what) + ": 'after' is longer than any buffer name");
  return after;
}
std::size_t page_limit(const Body& req, const char* what) {
  return req.contains("limit") ? protocol::get_u64(req, "limit", what) : kMaxPageEntries;
}
template <class T>
Body page_reply(Body fields, const char* items, const Page<T>& page, Body list) {
  fields[items] = std::move(list);
  if (!page.next.empty()) fields["next"] = page.next;
  return protocol::ok_reply(std::move(fields));
}

}  // namespace

// A layout reserved here must be one this fabric could hold: its share on
// this server within this server's capacity (layout_from_body has checked
// the geometry and the bounds every server shares).
void RequestHandler::check_fits(const Layout& layout) const {
  const auto capacity = registry_.store().stats().capacity;
  for (std::size_t i = 0; i < layout.servers.size(); ++i) {
    if (!is_me(layout.servers[i])) continue;
    if (layout.shares[i] > capacity)
      throw Error(Errc::no_space, "buffer '" + layout.name + "': its share of " + util::format_bytes(layout.shares[i]) +
                                      " on this server exceeds its capacity of " + util::format_bytes(capacity) +
                                      ": start smbd with a larger --capacity, stripe the buffer over more servers, or "
                                      "make it smaller");
    if (!layout.instances.empty() && layout.instances[i] != identity_.instance)
      throw Error(Errc::invalid_argument, "buffer '" + layout.name + "': its layout names another run of this server (" +
                                              "it restarted since the client connected): reconnect and retry");
  }
}

Body RequestHandler::hello(SessionId session, const Body& req) {
  const auto transport = protocol::get_string(req, "transport", "hello");
  if (transport != identity_.transport)
    throw Error(Errc::invalid_argument, "this smbd serves transport '" + identity_.transport +
                                            "', the client asked for " + util::quoted(transport));
  if (req.contains("id")) identities_.greeted(session, protocol::get_u64(req, "id", "hello"));
  auto reply = protocol::ok_reply({{"server", identity_.address},
                                   {"transport", identity_.transport},
                                   {"address", protocol::binary(identity_.transport_address)},
                                   {"session", session},
                                   {"instance", identity_.instance}});
  if (!server_map_.empty()) reply["replaced"] = server_map_.to_body();
  return reply;
}

bool RequestHandler::is_me(const std::string& slot) const {
  return slot == identity_.address || server_map_.resolve(slot) == identity_.address;
}

Body RequestHandler::server_map(SessionId, const Body&) {
  return protocol::ok_reply({{"replaced", server_map_.to_body()}});
}

// {slot, address, epoch}: taken where newer than what this server knows
// (the replacing client sends every server the same entry).
Body RequestHandler::replace_server(SessionId, const Body& req) {
  const auto slot = protocol::get_string(req, "slot", "replace_server");
  const auto address = protocol::get_string(req, "address", "replace_server");
  const auto epoch = protocol::get_u64(req, "epoch", "replace_server");
  auto candidate = server_map_;
  if (candidate.merge(Body{{slot, Body::array({address, epoch})}}, "replace_server")) {
    if (auto serving = server_map_.slot_of(address); serving && *serving != slot)
      throw Error(Errc::invalid_argument, "replace_server: " + util::quoted(address) + " already serves the place of " +
                                              util::quoted(*serving));
    server_map_ = std::move(candidate);
    spdlog::warn("server {} is served at {} from now on (replacement epoch {})", slot, address, epoch);
  }
  return protocol::ok_reply({{"replaced", server_map_.to_body()}});
}

Body RequestHandler::reserve_name(SessionId session, const Body& req) {
  auto it = req.find("layout");
  if (it == req.end()) throw Error(Errc::protocol, "reserve_name: no layout");
  auto layout = protocol::layout_from_body(*it, "reserve_name");
  check_fits(layout);
  // The record is named by the request's name, the one a credential's scope
  // was checked against (ControlServer::serve), so the layout must agree.
  if (const auto name = protocol::get_name(req, "name", "reserve_name"); name != layout.name)
    throw Error(Errc::invalid_argument, "reserve_name: the layout is named " + util::quoted(layout.name) +
                                            ", the request " + util::quoted(name));
  registry_.catalog().reserve_name(session, layout);
  return protocol::ok_reply();
}

Body RequestHandler::commit_layout(SessionId session, const Body& req) {
  registry_.catalog().commit_layout(session, protocol::get_name(req, "name", "commit_layout"));
  return protocol::ok_reply();
}

Body RequestHandler::abandon_name(SessionId session, const Body& req) {
  registry_.catalog().abandon_name(session, protocol::get_name(req, "name", "abandon_name"));
  return protocol::ok_reply();
}

Body RequestHandler::get_layout(SessionId, const Body& req) {
  return protocol::ok_reply(
      {{"layout", protocol::layout_to_body(registry_.catalog().get_layout(protocol::get_name(req, "name", "get_layout")))}});
}

Body RequestHandler::begin_repair(SessionId session, const Body& req) {
  return protocol::ok_reply({{"layout", protocol::layout_to_body(registry_.catalog().begin_repair(
                                            session, protocol::get_name(req, "name", "begin_repair")))}});
}

namespace {
// [[copy, server], ...]: copies of a buffer's layout (end_repair's `fresh`).
std::vector<CopyRef> copy_refs(const Body& req, const char* field, const char* what) {
  std::vector<CopyRef> out;
  auto it = req.find(field);
  if (it == req.end()) return out;
  if (!it->is_array() || it->size() > std::size_t{kMaxReplicas} * protocol::kMaxServersPerBuffer)
    throw Error(Errc::invalid_argument, std::string(what) + ": '" + field + "' must be a list of [copy, server] pairs");
  for (const auto& pair : *it) {
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_unsigned() || !pair[1].is_number_unsigned() ||
        pair[0].get<std::uint64_t>() >= kMaxReplicas || pair[1].get<std::uint64_t>() >= protocol::kMaxServersPerBuffer)
      throw Error(Errc::invalid_argument, std::string(what) + ": '" + field + "' must be a list of [copy, server] pairs");
    out.push_back({pair[0].get<std::uint32_t>(), pair[1].get<std::uint32_t>()});
  }
  return out;
}
}  // namespace

Body RequestHandler::end_repair(SessionId session, const Body& req) {
  const char* what = "end_repair";
  const auto name = protocol::get_name(req, "name", what);
  const auto fresh = copy_refs(req, "fresh", what);
  if (!req.contains("instances")) {
    registry_.catalog().end_repair(session, name, nullptr, fresh);
    return protocol::ok_reply();
  }
  const auto& list = req["instances"];
  if (!list.is_array() || list.size() > protocol::kMaxServersPerBuffer)
    throw Error(Errc::invalid_argument, "end_repair: 'instances' must be a list of at most " +
                                            std::to_string(protocol::kMaxServersPerBuffer) + " numbers");
  std::vector<std::uint64_t> instances;
  for (const auto& v : list) {
    if (!v.is_number_unsigned()) throw Error(Errc::invalid_argument, "end_repair: 'instances' must hold numbers");
    instances.push_back(v.get<std::uint64_t>());
  }
  registry_.catalog().end_repair(session, name, &instances, fresh);
  return protocol::ok_reply();
}

Body RequestHandler::mark_stale(SessionId session, const Body& req) {
  const char* what = "mark_stale";
  const auto name = protocol::get_name(req, "name", what);
  const auto replica = protocol::get_u64(req, "copy", what);
  const auto server = protocol::get_u64(req, "server", what);
  if (replica >= kMaxReplicas || server >= protocol::kMaxServersPerBuffer)
    throw Error(Errc::invalid_argument, "mark_stale: no copy " + std::to_string(replica) + " on server " +
                                            std::to_string(server) + " in any layout");
  const CopyRef copy{static_cast<std::uint32_t>(replica), static_cast<std::uint32_t>(server)};
  const auto [layout, added] = registry_.catalog().mark_stale(name, copy);
  if (added)
    spdlog::warn("buffer '{}': copy {} on {} fell behind the others (session {}: {}); 'smbctl repair' rebuilds it",
                 name, copy.replica, layout.servers[copy.server], session,
                 util::quoted(req.contains("why") && req["why"].is_string() ? req["why"].get<std::string>() : "?"));
  return protocol::ok_reply({{"layout", protocol::layout_to_body(layout)}, {"added", added}});
}

Body RequestHandler::segment_clients(SessionId, const Body& req) {
  const auto name = protocol::get_segment_name(req, "name", "segment_clients");
  const auto users = registry_.store().segment_users(name);
  Body clients = Body::array();
  for (const auto session : users.sessions) clients.push_back(identities_.of(session));
  return protocol::ok_reply(
      {{"clients", std::move(clients)}, {"opens", users.opens}, {"behind", registry_.store().is_behind(name)}});
}

Body RequestHandler::segment_digest(const Body& req) {
  const char* what = "segment_digest";
  const auto chunk = protocol::get_u64(req, "chunk", what);
  const auto length = protocol::get_u64(req, "length", what);
  // A reply holds at most protocol::kMaxDigests (64 KiB), and a chunk is at least 4 KiB.
  if (chunk < 4096 || length > protocol::kMaxDigests * chunk)
    throw Error(Errc::invalid_argument, "segment_digest: chunk must be at least 4096 bytes and the length at most " +
                                            std::to_string(protocol::kMaxDigests) + " chunks");
  return protocol::ok_reply({{"digests", protocol::binary(registry_.store().digest(protocol::get_segment_name(req, "name", what),
                                                                          protocol::get_u64(req, "offset", what),
                                                                          length, chunk))}});
}

Body RequestHandler::set_version(SessionId, const Body& req) {
  const char* what = "set_version";
  registry_.store().set_version(protocol::get_segment_name(req, "name", what), protocol::get_u64(req, "version", what));
  return protocol::ok_reply();
}

Body RequestHandler::alloc_segment(SessionId session, const Body& req) {
  const char* what = "alloc_segment";
  return protocol::ok_reply(protocol::segment_body(
      registry_.store().alloc_segment(session, protocol::get_segment_name(req, "name", what), protocol::get_u64(req, "length", what))));
}

Body RequestHandler::open_segment(SessionId session, const Body& req) {
  return protocol::ok_reply(
      protocol::segment_body(registry_.store().open_segment(session, protocol::get_segment_name(req, "name", "open_segment"))));
}

Body RequestHandler::close_segment(SessionId session, const Body& req) {
  registry_.store().close_segment(session, protocol::get_segment_name(req, "name", "close_segment"));
  return protocol::ok_reply();
}

Body RequestHandler::destroy(SessionId, const Body& req) {
  registry_.destroy(protocol::get_segment_name(req, "name", "destroy"));
  return protocol::ok_reply();
}

namespace {
// What the server did since it started (smbctl top turns it into rates).
Body activity_body(const ServerActivity& t) {
  return {{"requests", t.requests},
          {"errors", t.errors},
          {"vector_ops", t.vector_ops},
          {"vector_bytes", t.vector_bytes},
          {"transport_bytes_written", t.transport_bytes_written},
          {"transport_bytes_read", t.transport_bytes_read}};
}
}  // namespace

Body RequestHandler::stat(const Body& req, std::string_view scope) {
  const char* what = "stat";
  const auto s = registry_.store().stats();
  const auto page = registry_.store().buffers(page_after(req, what), page_limit(req, what), scope);
  Body buffers = Body::array();
  for (const auto& b : page.items)
    buffers.push_back({{"name", b.name}, {"bytes", b.bytes}, {"open_handles", b.open_handles}});
  return page_reply({{"server", identity_.address},
                     {"transport", identity_.transport},
                     {"instance", identity_.instance},
                     {"capacity", s.capacity},
                     {"used", s.used},
                     {"largest_free", s.largest_free},
                     {"huge_pages", s.huge_pages},
                     {"populated", s.populated},
                     {"clients", clients_.load()},
                     {"buffer_count", s.buffer_count},
                     {"activity", activity_body(metrics_.totals())}},
                    "buffers", page, std::move(buffers));
}

Body RequestHandler::list_layouts(const Body& req, std::string_view scope) {
  const char* what = "list_layouts";
  const auto page = registry_.catalog().list_layouts(page_after(req, what), page_limit(req, what), scope);
  Body layouts = Body::array();
  for (const auto& l : page.items) layouts.push_back(protocol::layout_to_body(l));
  return page_reply(Body::object(), "layouts", page, std::move(layouts));
}

Body RequestHandler::diagnose(const Body&) {
  const auto checks = check_this_host({.transport = identity_.transport,
                                       .pinned_bytes = registry_.store().stats().capacity,
                                       .connections = 0});
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return protocol::ok_reply({{"checks", host::findings_to_body(checks)},
                             {"clock_ns", std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()}});
}

}  // namespace smb::server
