#pragma once
// The daemon's side of the UCX transport: registrations, the progress loop,
// the server-assisted "am" data protocol and calls (see am_wire.hpp).
#include "transport/call_wire.hpp"
#include "transport/reply_queue.hpp"
#include "transport/transport.hpp"
#include "transport/ucx/ucx_handles.hpp"
#include "util/fd.hpp"
#include "util/service_thread.hpp"

#include <map>
#include <unordered_map>
#include <mutex>
#include <thread>
#include <vector>

namespace smb::transport::ucx {

// The pool, mapped by UCX once: one SysV segment (or POSIX shared-memory
// file) for the whole pool rather than one per buffer, so the number of
// buffers never runs into the host's kernel.shmmni or the fd limit.
class UcxPoolRegistration final : public Registration {
 public:
  UcxPoolRegistration(ucp_context_h context, void* base, std::size_t length)
      : map_(context, base, length), rkey_(map_.pack_rkey()) {}
  const Bytes& remote_key() const override { return rkey_; }

 private:
  MemoryMap map_;
  Bytes rkey_;
};

// A segment inside the pool: the pool's key (clients bounds-check each op
// against the segment's descriptor; the server checks every server-assisted op).
class UcxSegmentRegistration final : public Registration {
 public:
  explicit UcxSegmentRegistration(const Bytes& pool_key) : key_(pool_key) {}
  const Bytes& remote_key() const override { return key_; }

 private:
  const Bytes& key_;
};

class UcxServerTransport final : public ServerTransport {
 public:
  UcxServerTransport();
  ~UcxServerTransport() override;

  std::string name() const override { return "ucx"; }
  const Bytes& address() const override { return address_; }
  std::unique_ptr<Registration> register_pool(void* base, std::size_t length) override;
  std::unique_ptr<Registration> register_memory(void* base, std::size_t length) override;
  void start(SegmentResolver resolver, CallHandler calls, const ServerTuning& tuning,
             ChannelAdmission admission) override;
  void stop() override;
  const ServerTraffic* traffic() const override { return &traffic_; }

 private:
  static ucs_status_t on_write(void* arg, const void* header, std::size_t header_length, void* data,
                               std::size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t on_read(void* arg, const void* header, std::size_t header_length, void* data,
                              std::size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t on_call(void* arg, const void* header, std::size_t header_length, void* data,
                              std::size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t on_atomic(void* arg, const void* header, std::size_t header_length, void* data,
                                std::size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t on_read_bulk(void* arg, const void* header, std::size_t header_length, void* data,
                                   std::size_t length, const ucp_am_recv_param_t* param);
  void serve_read(const void* header, std::size_t header_length, void* data, const ucp_am_recv_param_t* param,
                  std::uint32_t protocol);
  static ucs_status_t on_ping(void* arg, const void* header, std::size_t header_length, void* data,
                              std::size_t length, const ucp_am_recv_param_t* param);
  template <class Header>
  bool take_header(const void* header, std::size_t header_length, void* data, const ucp_am_recv_param_t* param,
                   Header& out);
  void progress_loop(const std::stop_token& stop);
  bool send_queued_replies();  // true when there were any
  // The progress thread's: every reply to a client goes out here.
  void send_reply(ucp_ep_h ep, std::uint64_t token, Errc status, const void* data, std::size_t length,
                  std::shared_ptr<const void> owner, std::uint64_t value = 0, Bytes frame = {},
                  std::uint32_t protocol = UCP_AM_SEND_FLAG_EAGER);
  void delivered(ucp_ep_h ep);
  static void reply_sent(void* request, ucs_status_t status, void* user_data);
  static void write_received(void* request, ucs_status_t status, std::size_t length, void* user_data);
  static void call_received(void* request, ucs_status_t status, std::size_t length, void* user_data);
  // Hands a call to calls_, whose reply is queued for this thread; a failed
  // receive (status) answers "transport" instead.
  void dispatch_call(ucp_ep_h ep, std::uint64_t token, ucs_status_t status, CallParts parts, std::string_view scope);
  void set_handler(unsigned id, ucp_am_recv_callback_t callback);
  // The scope of the sender's channel where it presented a ticket admitted
  // now (its ping, channel_admission.hpp); nullptr where it did not. The
  // progress thread's.
  const std::string* admitted(const ucp_am_recv_param_t* param);
  void forget_revoked();

  ContextPtr context_;
  const Bytes* pool_key_ = nullptr;  // owned by the pool's registration
  std::byte* pool_base_ = nullptr;
  std::size_t pool_length_ = 0;
  WorkerPtr worker_;  // touched only by the progress thread once started
  Bytes address_;
  SegmentResolver resolver_;
  CallHandler calls_;
  ServerTuning tuning_;
  ChannelAdmission admission_;
  // The tickets client workers' channels presented, by the endpoint that
  // answers them (one per client worker); the progress thread's.
  std::unordered_map<ucp_ep_h, AdmittedTicket> admitted_;
  std::uint64_t revocations_seen_ = 0;
  // Call replies come from other threads; the progress thread sends them.
  ReplyQueue<ucp_ep_h> replies_{[this] { thread_.wake(); }};
  // Replies handed to UCX and not yet completed, per client endpoint (the
  // progress thread's; an entry goes when its count is back to 0).
  std::map<ucp_ep_h, ReplyBacklog> backlogs_;
  bool warned_backlog_ = false;
  ServerTraffic traffic_;
  util::ServiceThread thread_;  // last: stopped before the members its loop uses go
};

}  // namespace smb::transport::ucx
