#pragma once
// The daemon's side of the native verbs transport: one memory registration
// (and rkey) per segment, and a thread that accepts rdma_cm connections and
// serves calls. Clients read, write and do atomics one-sided: the server CPU
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

class VerbsRegistration final : public Registration {
 public:
  VerbsRegistration(ibv_pd* pd, void* base, std::size_t length);
  const Bytes& remote_key() const override { return rkey_; }

 private:
  MrPtr mr_;
  Bytes rkey_;  // the MR's rkey, 4 bytes host order
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

  // Declaration order is destruction order in reverse: connections (QPs)
  // before the CQ and PD, the listening id before its event channel.
  ibv_context* context_;
  PdPtr pd_;
  CompChannelPtr completions_;  // every connection's CQ reports here
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
