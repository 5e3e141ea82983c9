#pragma once
// The daemon's side of the native verbs transport: one memory registration
// (and rkey) per segment and per rail -- each active RDMA port it uses, so
// that clients stripe over all of them (issue 37 item 3) -- and a thread
// that accepts rdma_cm connections and serves calls. Clients read, write and do atomics one-sided: the server CPU
// does nothing per op. Calls (vector ops, version waits) come as SENDs into
// receives each connection keeps posted (call_wire.hpp); replies go back as
// SENDs, posted by this thread.
#include "transport/reply_queue.hpp"
#include "transport/transport.hpp"
#include "transport/verbs/verbs_handles.hpp"
#include "util/fd.hpp"
#include "util/service_thread.hpp"

#include <deque>
#include <map>
#include <mutex>
#include <thread>

namespace smb::transport::verbs {

// The segment registered with each rail's protection domain; its key is
// their rkeys, 4 bytes each (host order), in rail order.
class VerbsRegistration final : public Registration {
 public:
  VerbsRegistration(const std::vector<ibv_pd*>& pds, void* base, std::size_t length);
  const Bytes& remote_key() const override { return rkeys_; }

 private:
  std::vector<MrPtr> mrs_;
  Bytes rkeys_;
};

class VerbsServerTransport final : public ServerTransport {
 public:
  VerbsServerTransport();
  ~VerbsServerTransport() override;

  std::string name() const override { return "verbs"; }
  const Bytes& address() const override { return address_; }
  // Per segment: an rkey reaches its own segment only, over the network.
  std::unique_ptr<Registration> register_pool(void*, std::size_t) override { return nullptr; }
  std::unique_ptr<Registration> register_memory(void* base, std::size_t length) override;
  void start(SegmentResolver resolver, CallHandler calls, const ServerTuning& tuning,
             ChannelAdmission admission) override;
  void stop() override;

 private:
  struct Connection;
  // One active port clients reach this server through: its own protection
  // domain (a domain belongs to one device) and completion channel.
  struct ServerRail {
    LocalPort port;
    PdPtr pd;
    CompChannelPtr completions;  // every connection's CQ on this rail reports here
  };

  void event_loop(const std::stop_token& stop);
  void on_event(const rdma_cm_event& event);
  void accept(rdma_cm_id* id, const rdma_conn_param& requested);
  void drop_revoked();  // disconnects the connections whose session closed
  bool poll_connection(Connection& c);  // true when it took any completion
  void on_call(Connection& c, std::uint32_t slot, std::size_t length);
  bool send_replies();  // true when there were any
  // Holds the reply against the client's backlog, then posts it or queues it for a send slot.
  void send_reply(Connection& c, std::uint64_t token, Bytes frame);
  void post_reply(Connection& c, std::uint64_t token, const Bytes& frame);

  static std::vector<ServerRail> make_rails();
  const ServerRail* rail_of(const rdma_cm_id* id) const;

  // Declaration order is destruction order in reverse: connections (QPs)
  // before the CQs and PDs, the listening id before its event channel.
  std::vector<ServerRail> rails_;
  EventChannelPtr events_;
  IdPtr listener_;
  std::map<rdma_cm_id*, std::shared_ptr<Connection>> connections_;  // touched only by the thread once started
  Bytes address_;
  CallHandler calls_;
  ServerTuning tuning_;
  ChannelAdmission admission_;
  std::uint64_t revocations_seen_ = 0;
  // Replies come from other threads; the thread sends them.
  ReplyQueue<std::weak_ptr<Connection>> replies_{[this] { thread_.wake(); }};
  util::ServiceThread thread_;  // last: stopped before the members its loop uses go
};

}  // namespace smb::transport::verbs
