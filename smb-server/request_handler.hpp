#pragma once
// The requests answered at once, each by its own method (routed by the table
// in message_routes.cpp). A method returns the ok reply or throws smb::Error
// naming what was wrong; the caller turns that into an error reply.
#include "client_identities.hpp"
#include "metrics.hpp"
#include "protocol/messages.hpp"
#include "protocol/server_map.hpp"
#include "registry.hpp"
#include "replies.hpp"

#include <atomic>

namespace smb::server {

struct ServerIdentity {
  std::string address;    // "host:port" this daemon listens on
  std::string transport;  // "ucx"
  transport::Bytes transport_address;
  // Drawn at random at start: a layout records the run that holds each
  // share, so a client can tell a restarted (empty) server from the one
  // that has its data.
  std::uint64_t instance = 0;
};

class RequestHandler {
 public:
  RequestHandler(Registry& registry, ClientIdentities& identities, const ServerIdentity& identity,
                 const std::atomic<std::uint32_t>& clients, const Metrics& metrics)
      : registry_(registry), identities_(identities), identity_(identity), clients_(clients), metrics_(metrics) {}

  using Body = protocol::Body;
  Body hello(SessionId session, const Body& request);
  Body reserve_name(SessionId session, const Body& request);
  Body commit_layout(SessionId session, const Body& request);
  Body abandon_name(SessionId session, const Body& request);
  Body get_layout(SessionId session, const Body& request);
  Body alloc_segment(SessionId session, const Body& request);
  Body open_segment(SessionId session, const Body& request);
  Body close_segment(SessionId session, const Body& request);
  Body destroy(SessionId session, const Body& request);
  // Listings: a credential's session (`scope`: its prefix) sees its own names only.
  Body stat(const Body& request, std::string_view scope);
  Body list_layouts(const Body& request, std::string_view scope);
  // Repair (LayoutCatalog::begin_repair and after).
  Body begin_repair(SessionId session, const Body& request);
  Body end_repair(SessionId session, const Body& request);
  Body segment_digest(const Body& request);  // any thread
  Body set_version(SessionId session, const Body& request);
  Body mark_stale(SessionId session, const Body& request);
  // Who holds a segment open, by client identity (ClientIdentities).
  Body segment_clients(SessionId session, const Body& request);
  // Servers replaced at new addresses (protocol/server_map.hpp): the map this
  // server was told, handed to every client in its hello.
  Body server_map(SessionId session, const Body& request);
  Body replace_server(SessionId session, const Body& request);  // its route admits no credential's session
  // This host's checks for this server's transport and pool (smbctl
  // doctor), and its clock as the answer is made; any thread.
  Body diagnose(const Body& request);
  // An ordered op on segment `name` waited in vain for the op before it.
  void fell_behind(const std::string& name) { registry_.store().fell_behind(name); }
  // Runs a vector op (vector_runs.hpp); with `wait` false: nullopt when
  // another op holds the buffer. Returns the buffer's version after it.
  std::optional<Applied> apply(const VectorRequest& request, bool wait) { return registry_.store().apply(request, wait); }
  // The version of this server's segment of `name`, read between ops.
  SegmentStore::SettledVersion settled_version(const std::string& name) const {
    return registry_.store().settled_version(name);
  }

 private:
  void check_fits(const Layout& layout) const;
  // Whether a layout's server `slot` is this one: its own address, or the
  // slot it replaces.
  bool is_me(const std::string& slot) const;

  Registry& registry_;
  ClientIdentities& identities_;
  const ServerIdentity& identity_;
  const std::atomic<std::uint32_t>& clients_;
  const Metrics& metrics_;
  protocol::ServerMap server_map_;
};

}  // namespace smb::server
