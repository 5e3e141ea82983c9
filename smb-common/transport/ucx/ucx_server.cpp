#include "transport/ucx/ucx_server.hpp"

#include "transport/call_wire.hpp"
#include "transport/idle_spin.hpp"
#include "transport/ucx/am_checks.hpp"
#include "transport/ucx/am_wire.hpp"

#include <spdlog/spdlog.h>
#include <sys/epoll.h>

#include <atomic>
#include <cstring>

namespace smb::transport::ucx {
namespace {

// Everything a reply needs until UCX reports its send complete.
struct ReplyContext {
  AmReplyHeader header{};
  std::shared_ptr<const void> owner;  // keeps the segment alive while sending from it
  std::uint64_t value = 0;            // atomics: the old value, sent from here
  Bytes frame;                        // calls: the reply frame, sent from here
  UcxServerTransport* transport = nullptr;
  ucp_ep_h ep = nullptr;
};

struct WriteContext {
  UcxServerTransport* transport;
  ucp_ep_h reply_ep;
  std::uint64_t token;
  SegmentAccess access;
};

// A call whose payload comes by rendezvous: its frame came in the message's
// header, and UCX moves the payload straight into its buffer (no bounce
// buffer, no split copy).
struct CallContext {
  UcxServerTransport* transport;
  ucp_ep_h reply_ep;
  std::uint64_t token;
  CallParts parts;
  std::string scope;  // the calling channel's (channel_admission.hpp)
};

}  // namespace

// Callbacks free their request: ucp_request_free() on a request still in
// flight would disable its callback (and leak what it should release).
void UcxServerTransport::write_received(void* request, ucs_status_t status, std::size_t /*length*/,
                                        void* user_data) {
  std::unique_ptr<WriteContext> ctx(static_cast<WriteContext*>(user_data));
  ucp_request_free(request);
  ctx->transport->send_reply(ctx->reply_ep, ctx->token, status == UCS_OK ? Errc::ok : Errc::transport, nullptr, 0,
                             {});
}

void UcxServerTransport::call_received(void* request, ucs_status_t status, std::size_t /*length*/,
                                       void* user_data) {
  std::unique_ptr<CallContext> ctx(static_cast<CallContext*>(user_data));
  ucp_request_free(request);
  ctx->transport->dispatch_call(ctx->reply_ep, ctx->token, status, std::move(ctx->parts), ctx->scope);
}

void UcxServerTransport::dispatch_call(ucp_ep_h ep, std::uint64_t token, ucs_status_t status, CallParts parts,
                                       std::string_view scope) {
  if (status != UCS_OK) return send_reply(ep, token, Errc::transport, nullptr, 0, {});
  calls_(std::move(parts.frame), std::move(parts.payload), scope,
         [this, ep, token](Bytes reply) { replies_.push(ep, token, std::move(reply)); });
}

void UcxServerTransport::reply_sent(void* request, ucs_status_t status, void* user_data) {
  std::unique_ptr<ReplyContext> ctx(static_cast<ReplyContext*>(user_data));
  ucp_request_free(request);
  if (status != UCS_OK) spdlog::debug("am reply not delivered: {}", ucs_status_string(status));
  ctx->transport->delivered(ctx->ep);
}

void UcxServerTransport::delivered(ucp_ep_h ep) {
  auto it = backlogs_.find(ep);
  if (it == backlogs_.end()) return;
  it->second.delivered();
  if (it->second.undelivered() == 0) backlogs_.erase(it);  // nothing kept for clients that went
}

// `data` null with `length` 8 sends `value` (an atomic's old value); with
// `frame` given, sends that. Held against the client's backlog until UCX
// reports it sent; beyond the bound (reply_queue.hpp) the reply is dropped.
void UcxServerTransport::send_reply(ucp_ep_h ep, std::uint64_t token, Errc status, const void* data,
                                    std::size_t length, std::shared_ptr<const void> owner, std::uint64_t value,
                                    Bytes frame, std::uint32_t protocol) {
  auto& backlog = backlogs_[ep];
  if (!backlog.admit()) {
    if (!std::exchange(warned_backlog_, true))
      spdlog::warn("ucx: a client does not take its replies ({} undelivered); dropping its replies beyond that",
                   backlog.undelivered());
    return;
  }
  auto ctx = std::make_unique<ReplyContext>();
  ctx->transport = this;
  ctx->ep = ep;
  ctx->value = value;
  ctx->frame = std::move(frame);
  if (data == nullptr && length == sizeof value) data = &ctx->value;
  if (!ctx->frame.empty()) {
    data = ctx->frame.data();
    length = ctx->frame.size();
  }
  ctx->header.token = token;
  ctx->header.status = static_cast<std::int32_t>(status);
  ctx->header.length = length;
  ctx->owner = std::move(owner);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = protocol;
  param.cb.send = &UcxServerTransport::reply_sent;
  param.user_data = ctx.get();
  ucs_status_ptr_t request =
      ucp_am_send_nbx(ep, kAmReply, &ctx->header, sizeof(ctx->header), data, length, &param);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) {
    if (request != nullptr) spdlog::debug("am reply failed: {}", ucs_status_string(UCS_PTR_STATUS(request)));
    delivered(ep);  // done at once (or never); ctx freed here
    return;
  }
  (void)ctx.release();  // reply_sent owns it now, and frees the request
}

UcxServerTransport::UcxServerTransport()
    : context_(make_context("smbd")),
      worker_(make_worker(context_.get(), UCS_THREAD_MODE_SINGLE)),
      address_(worker_address(worker_.get())) {
  set_handler(kAmWrite, &UcxServerTransport::on_write);
  set_handler(kAmRead, &UcxServerTransport::on_read);
  set_handler(kAmReadBulk, &UcxServerTransport::on_read_bulk);
  set_handler(kAmAtomic, &UcxServerTransport::on_atomic);
  set_handler(kAmCall, &UcxServerTransport::on_call);
  set_handler(kAmPing, &UcxServerTransport::on_ping);
}

UcxServerTransport::~UcxServerTransport() { stop(); }

void UcxServerTransport::set_handler(unsigned id, ucp_am_recv_callback_t callback) {
  ucp_am_handler_param_t param{};
  param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                     UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  param.id = id;
  param.cb = callback;
  param.arg = this;
  param.flags = UCP_AM_FLAG_WHOLE_MSG;
  check_ucx(ucp_worker_set_am_recv_handler(worker_.get(), &param), "smbd: installing AM handler");
}

std::unique_ptr<Registration> UcxServerTransport::register_pool(void* base, std::size_t length) {
  auto pool = std::make_unique<UcxPoolRegistration>(context_.get(), base, length);
  pool_key_ = &pool->remote_key();
  pool_base_ = static_cast<std::byte*>(base);
  pool_length_ = length;
  return pool;
}

std::unique_ptr<Registration> UcxServerTransport::register_memory(void* base, std::size_t length) {
  auto* begin = static_cast<std::byte*>(base);
  if (pool_key_ == nullptr || begin < pool_base_ || length > pool_length_ ||
      static_cast<std::size_t>(begin - pool_base_) > pool_length_ - length)
    throw Error(Errc::internal, "ucx: a segment outside the registered pool");
  return std::make_unique<UcxSegmentRegistration>(*pool_key_);
}

void UcxServerTransport::start(SegmentResolver resolver, CallHandler calls, const ServerTuning& tuning,
                               ChannelAdmission admission) {
  resolver_ = std::move(resolver);
  calls_ = std::move(calls);
  tuning_ = tuning;
  admission_ = std::move(admission);
  thread_.start([this](const std::stop_token& stop) { progress_loop(stop); });
}

void UcxServerTransport::stop() { thread_.stop(); }

// Progress until idle, then sleep on the worker's event fd: a server whose
// clients use one-sided RMA spends no CPU here at all. Busy-polling
// (ServerTuning) never sleeps: calls are seen as soon as they land.
void UcxServerTransport::progress_loop(const std::stop_token& stop) {
  int worker_fd = -1;
  check_ucx(ucp_worker_get_efd(worker_.get(), &worker_fd), "smbd: getting the UCX event fd");
  util::UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = worker_fd;
  ::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, worker_fd, &ev);
  ev.data.fd = thread_.wake_fd();
  ::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, thread_.wake_fd(), &ev);
  IdleSpin idle(tuning_);
  while (!stop.stop_requested()) {
    bool worked = false;
    while (ucp_worker_progress(worker_.get()) != 0) worked = true;
    // After progress: the calls it ran queued their replies without waking
    // this thread (it is this thread), so they must go before it sleeps.
    worked |= send_queued_replies();
    if (revoked_since(admission_, revocations_seen_)) forget_revoked();
    if (!idle.may_sleep(worked)) continue;
    ucs_status_t status = ucp_worker_arm(worker_.get());
    if (status == UCS_ERR_BUSY) continue;
    if (status != UCS_OK) {
      spdlog::error("smbd: ucp_worker_arm failed: {}", ucs_status_string(status));
      continue;
    }
    epoll_event events[2];
    const int n = ::epoll_wait(epoll.get(), events, 2, 500);
    for (int i = 0; i < n; ++i)
      if (events[i].data.fd == thread_.wake_fd()) thread_.clear_wake();
    if (n > 0) idle.woke();
  }
  while (ucp_worker_progress(worker_.get()) != 0) {
  }
}

bool UcxServerTransport::send_queued_replies() {
  auto replies = replies_.take();
  for (auto& r : replies) send_reply(r.peer, r.token, Errc::ok, nullptr, 0, {}, 0, std::move(r.frame));
  return !replies.empty();
}

// A call: the frame and payload are copied out of an eager message (the
// handler may finish on another thread), or received straight into them from
// a rendezvous one (a large payload, am_wire.hpp); the reply is queued for
// this thread to send.
ucs_status_t UcxServerTransport::on_call(void* arg, const void* header, std::size_t header_length, void* data,
                                         std::size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxServerTransport*>(arg);
  const bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  // Rendezvous: the frame follows CallHeader in the header (am_wire.hpp).
  const auto h = read_header<CallHeader>(header, rndv ? std::min(header_length, sizeof(CallHeader)) : header_length);
  const bool can_reply = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0;
  const bool frame_fits = h && (rndv ? h->frame_length == header_length - sizeof(CallHeader)
                                     : h->frame_length <= length);
  const std::string* scope = h ? self->admitted(param) : nullptr;
  const Errc check = !h           ? Errc::protocol
                     : !scope     ? Errc::permission_denied
                     : !frame_fits ? Errc::protocol
                                   : Errc::ok;
  if (check != Errc::ok || !can_reply) {
    if (rndv) ucp_am_data_release(self->worker_.get(), data);
    if (can_reply) self->send_reply(param->reply_ep, h ? h->token : 0, check, nullptr, 0, {});
    return UCS_OK;
  }
  if (!rndv) {
    auto parts = split_call({static_cast<const std::uint8_t*>(data), length}, h->frame_length);
    self->dispatch_call(param->reply_ep, h->token, UCS_OK, std::move(*parts), *scope);  // the length was checked above
    return UCS_OK;
  }
  const auto* frame = static_cast<const std::uint8_t*>(header) + sizeof(CallHeader);
  auto ctx = std::make_unique<CallContext>(CallContext{
      self, param->reply_ep, h->token,
      CallParts{std::vector<std::uint8_t>(frame, frame + h->frame_length), std::vector<std::uint8_t>(length)},
      *scope});
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  rp.cb.recv_am = &UcxServerTransport::call_received;
  rp.user_data = ctx.get();
  ucs_status_ptr_t request =
      ucp_am_recv_data_nbx(self->worker_.get(), data, ctx->parts.payload.data(), ctx->parts.payload.size(), &rp);
  if (request == nullptr)
    self->dispatch_call(ctx->reply_ep, ctx->token, UCS_OK, std::move(ctx->parts), ctx->scope);
  else if (UCS_PTR_IS_ERR(request))
    self->dispatch_call(ctx->reply_ep, ctx->token, UCS_PTR_STATUS(request), {}, ctx->scope);
  else
    (void)ctx.release();  // call_received owns it now, and frees the request
  return UCS_OK;
}

ucs_status_t UcxServerTransport::on_write(void* arg, const void* header, std::size_t header_length,
                                          void* data, std::size_t length,
                                          const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxServerTransport*>(arg);
  const bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  const bool can_reply = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0;
  const auto parsed = read_header<AmRequestHeader>(header, header_length);
  const AmRequestHeader h = parsed.value_or(AmRequestHeader{});
  Errc check = Errc::protocol;
  SegmentAccess access;
  if (parsed) {
    const std::string* scope = self->admitted(param);
    check = h.length != length ? Errc::protocol
            : !scope           ? Errc::permission_denied
                               : check_request(self->resolver_, *scope, h, access);
  }
  if (check != Errc::ok || !can_reply) {
    if (rndv) ucp_am_data_release(self->worker_.get(), data);
    if (can_reply) self->send_reply(param->reply_ep, h.token, check, nullptr, 0, {});
    return UCS_OK;
  }
  std::byte* dst = access.base + h.offset;
  self->traffic_.bytes_written.fetch_add(length, std::memory_order_relaxed);
  if (!rndv) {
    std::memcpy(dst, data, length);
    self->send_reply(param->reply_ep, h.token, Errc::ok, nullptr, 0, {});
    return UCS_OK;
  }
  // Rendezvous: UCX moves the payload straight into the segment.
  auto ctx = std::make_unique<WriteContext>(WriteContext{self, param->reply_ep, h.token, std::move(access)});
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  rp.cb.recv_am = &UcxServerTransport::write_received;
  rp.user_data = ctx.get();
  ucs_status_ptr_t request = ucp_am_recv_data_nbx(self->worker_.get(), data, dst, length, &rp);
  if (request == nullptr) {
    self->send_reply(ctx->reply_ep, ctx->token, Errc::ok, nullptr, 0, {});
  } else if (UCS_PTR_IS_ERR(request)) {
    self->send_reply(ctx->reply_ep, ctx->token, Errc::transport, nullptr, 0, {});
  } else {
    (void)ctx.release();  // write_received owns it now, and frees the request
  }
  return UCS_OK;
}

// The start of a request that carries no payload (read, atomic): drops any
// payload, and copies out a header of exactly the expected size, else
// answers "protocol" (when it can answer at all) and returns false.
template <class Header>
bool UcxServerTransport::take_header(const void* header, std::size_t header_length, void* data,
                                     const ucp_am_recv_param_t* param, Header& out) {
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ucp_am_data_release(worker_.get(), data);
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) return false;
  const auto parsed = read_header<Header>(header, header_length);
  if (!parsed) {
    send_reply(param->reply_ep, 0, Errc::protocol, nullptr, 0, {});
    return false;
  }
  out = *parsed;
  return true;
}

// A ping wires up the way back to the client; one that carries a ticket
// also admits the client's channel (channel_admission.hpp), or says why not.
ucs_status_t UcxServerTransport::on_ping(void* arg, const void* header, std::size_t header_length, void* data,
                                         std::size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxServerTransport*>(arg);
  const bool eager = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0;
  std::optional<AdmittedTicket> presented;
  if (eager && length != 0) presented.emplace(std::span(static_cast<const std::uint8_t*>(data), length));
  AmPingHeader h{};
  if (!self->take_header(header, header_length, data, param, h)) return UCS_OK;
  if (presented) self->admitted_[param->reply_ep] = std::move(*presented);
  const bool ok = !presented || self->admitted(param) != nullptr;
  self->send_reply(param->reply_ep, h.token, ok ? Errc::ok : Errc::permission_denied, nullptr, 0, {});
  return UCS_OK;
}

// Sessions closed: their channels' entries go (so departed clients leave nothing here).
void UcxServerTransport::forget_revoked() {
  for (auto it = admitted_.begin(); it != admitted_.end();)
    it = it->second.admitted(admission_) ? std::next(it) : admitted_.erase(it);
}

const std::string* UcxServerTransport::admitted(const ucp_am_recv_param_t* param) {
  static const std::string kEveryName;
  if (!admission_.required()) return &kEveryName;
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) return nullptr;
  auto it = admitted_.find(param->reply_ep);
  if (it == admitted_.end()) return nullptr;
  if (it->second.admitted(admission_)) return &it->second.scope();
  admitted_.erase(it);  // its session closed, or it never had one
  return nullptr;
}

ucs_status_t UcxServerTransport::on_read(void* arg, const void* header, std::size_t header_length,
                                         void* data, std::size_t /*length*/,
                                         const ucp_am_recv_param_t* param) {
  static_cast<UcxServerTransport*>(arg)->serve_read(header, header_length, data, param, UCP_AM_SEND_FLAG_EAGER);
  return UCS_OK;
}

ucs_status_t UcxServerTransport::on_read_bulk(void* arg, const void* header, std::size_t header_length,
                                              void* data, std::size_t /*length*/,
                                              const ucp_am_recv_param_t* param) {
  static_cast<UcxServerTransport*>(arg)->serve_read(header, header_length, data, param, UCP_AM_SEND_FLAG_RNDV);
  return UCS_OK;
}

void UcxServerTransport::serve_read(const void* header, std::size_t header_length, void* data,
                                    const ucp_am_recv_param_t* param, std::uint32_t protocol) {
  AmRequestHeader h{};
  if (!take_header(header, header_length, data, param, h)) return;
  SegmentAccess access;
  const std::string* scope = admitted(param);
  const Errc check = scope ? check_request(resolver_, *scope, h, access) : Errc::permission_denied;
  if (check != Errc::ok) {
    send_reply(param->reply_ep, h.token, check, nullptr, 0, {});
    return;
  }
  traffic_.bytes_read.fetch_add(h.length, std::memory_order_relaxed);
  // Zero-copy from the segment; `owner` keeps it alive until the send completes.
  send_reply(param->reply_ep, h.token, Errc::ok, access.base + h.offset, h.length, access.owner, 0, {}, protocol);
}

// Atomics for clients whose path has no atomic lane (TCP). The server CPU's
// atomic instructions are coherent with UCX's shared-memory atomics, which
// also run on the CPU; NIC atomics (verbs) are not, so one buffer should not
// mix the two (docs/architecture.md).
ucs_status_t UcxServerTransport::on_atomic(void* arg, const void* header, std::size_t header_length,
                                           void* data, std::size_t /*length*/,
                                           const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxServerTransport*>(arg);
  AmAtomicHeader h{};
  if (!self->take_header(header, header_length, data, param, h)) return UCS_OK;
  SegmentAccess access;
  const AtomicRequest request = atomic_request(h);
  const std::string* scope = self->admitted(param);
  const Errc check = scope ? check_atomic(self->resolver_, *scope, request, access) : Errc::permission_denied;
  if (check != Errc::ok) {
    self->send_reply(param->reply_ep, h.token, check, nullptr, 0, {});
    return UCS_OK;
  }
  const std::uint64_t old = apply_atomic(request, access);
  self->traffic_.atomics.fetch_add(1, std::memory_order_relaxed);
  self->send_reply(param->reply_ep, h.token, Errc::ok, nullptr, sizeof old, {}, old);
  return UCS_OK;
}

}  // namespace smb::transport::ucx
