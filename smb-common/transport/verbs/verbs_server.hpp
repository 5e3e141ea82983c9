#pragma once
// The daemon's side of the native verbs transport: one memory registration
// (and rkey) per segment, and a thread that accepts rdma_cm connections.
// Clients then read, write and do atomics one-sided: the server CPU does
// nothing per op, so there is no server-assisted protocol here.
#include "transport/transport.hpp"
#include "transport/verbs/verbs_handles.hpp"
#include "util/fd.hpp"
#include "util/service_thread.hpp"

#include <map>
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
  std::unique_ptr<Registration> register_memory(void* base, std::size_t length) override;
  void start(SegmentResolver resolver, CallHandler calls) override;
  void stop() override;

 private:
  void event_loop(const std::stop_token& stop);
  void on_event(const rdma_cm_event& event);
  void accept(rdma_cm_id* id, const rdma_conn_param& requested);

  // Declaration order is destruction order in reverse: connections (QPs)
  // before the CQ and PD, the listening id before its event channel.
  ibv_context* context_;
  PdPtr pd_;
  CqPtr cq_;  // every connection's QP reports here; nothing is ever posted on it
  EventChannelPtr events_;
  IdPtr listener_;
  std::map<rdma_cm_id*, IdPtr> connections_;  // touched only by the thread once started
  Bytes address_;
  util::ServiceThread thread_;  // last: stopped before the members its loop uses go
};

}  // namespace smb::transport::verbs
