#include "transport/ucx/ucx_client.hpp"

#include "transport/client_idle.hpp"
#include "util/parse.hpp"
#include "util/stream_copy.hpp"

#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

namespace smb::transport::ucx {

// State of an RMA/atomic op, owned by UCX between issue and callback. Small
// ops cost ~0.1 us, so contexts are reused (UcxClientTransport::spare_ops_)
// and the error text is built only on failure.
struct OpContext {
  UcxClientTransport* transport = nullptr;
  CompletionPtr completion;
  std::uint64_t operand = 0;
  std::shared_ptr<const std::string> peer;
  const char* op = "";
};

// Under the transport lock.
std::unique_ptr<OpContext> UcxClientTransport::op_context(CompletionPtr completion, std::uint64_t operand,
                                                          const std::shared_ptr<const std::string>& peer,
                                                          const char* op) {
  std::unique_ptr<OpContext> ctx;
  if (spare_ops_.empty()) {
    ctx = std::make_unique<OpContext>();
  } else {
    ctx = std::move(spare_ops_.back());
    spare_ops_.pop_back();
  }
  ctx->transport = this;
  ctx->completion = std::move(completion);
  ctx->operand = operand;
  if (ctx->peer != peer) ctx->peer = peer;  // a spare context keeps its last peer: no count per op
  ctx->op = op;
  return ctx;
}

// Under the transport lock (a UCX callback, or at issue).
void UcxClientTransport::finish_op(void* user_data, ucs_status_t status) {
  std::unique_ptr<OpContext> ctx(static_cast<OpContext*>(user_data));
  if (status == UCS_OK)
    ctx->completion->finish();
  else
    ctx->completion->finish(status == UCS_ERR_CONNECTION_RESET || status == UCS_ERR_ENDPOINT_TIMEOUT
                                ? Errc::server_gone
                                : Errc::transport,
                            "server " + *ctx->peer + ": " + ctx->op + ": UCX error: " + ucs_status_string(status));
  UcxClientTransport* transport = ctx->transport;
  ctx->completion.reset();  // the caller's completion may be reused once nobody holds it
  if (transport->spare_ops_.size() < kSpareOps) transport->spare_ops_.push_back(std::move(ctx));
}

namespace {

// A request UCX completes later reaches its callback, which frees it:
// ucp_request_free() on a request still in flight disables its callback.
void send_done(void* request, ucs_status_t status, void* user_data) {
  UcxClientTransport::finish_op(user_data, status);
  ucp_request_free(request);
}

// Hands `ctx` to UCX for the op that returned `request`, or completes it now.
void track(ucs_status_ptr_t request, std::unique_ptr<OpContext> ctx) {
  if (request == nullptr) {
    UcxClientTransport::finish_op(ctx.release(), UCS_OK);
  } else if (UCS_PTR_IS_ERR(request)) {
    UcxClientTransport::finish_op(ctx.release(), UCS_PTR_STATUS(request));
  } else {
    // in flight: send_done finishes it and frees the request
    (void)ctx.release();
  }
}

ucp_request_param_t callback_param(OpContext* ctx) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = send_done;
  p.user_data = ctx;
  return p;
}

}  // namespace

// ---------------------------------------------------------------- transport

UcxClientTransport::UcxClientTransport(DataProtocol protocol)
    : protocol_(protocol),
      context_(make_context("libsmb")),
      worker_(make_worker(context_.get(), UCS_THREAD_MODE_SERIALIZED)),
      address_(worker_address(worker_.get())) {
  ucp_am_handler_param_t param{};
  param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                     UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  param.id = kAmReply;
  param.cb = &UcxClientTransport::on_reply;
  param.arg = this;
  param.flags = UCP_AM_FLAG_WHOLE_MSG;
  check_ucx(ucp_worker_set_am_recv_handler(worker_.get(), &param), "libsmb: installing AM handler");
  if (ucp_worker_get_efd(worker_.get(), &event_fd_) != UCS_OK) event_fd_ = -1;  // then long waits sleep
}

UcxClientTransport::~UcxClientTransport() = default;

std::unique_ptr<Channel> UcxClientTransport::connect(const Bytes& server_address, const std::string& peer,
                                                     std::span<const std::uint8_t> ticket) {
  return std::make_unique<UcxChannel>(*this, server_address, peer, protocol_, ticket);
}

void UcxClientTransport::progress() {
  unsigned events;
  std::uint64_t seen;
  {
    std::lock_guard lock(mutex_);
    events = ucp_worker_progress(worker_.get());
    if (events != 0) {
      ++generation_;
      if (idle_sleepers_ > 0) idle_.notify_all();
    }
    seen = generation_;
  }
  yield_when_idle(events != 0, [this, seen](std::chrono::microseconds limit) { return block_for_event(limit, seen); });
}

// A long wait sleeps instead of spinning (client_idle.hpp). One waiting
// thread sleeps on the worker's event fd (armed, the worker's transports
// signal it when anything arrives); other waiting threads sleep on `idle_`,
// and whichever thread's progress finds events, or the fd's sleeper when it
// wakes, wakes them all to look. Nobody sleeps when anything happened since
// its own last look (`seen`, a generation of `generation_`).
bool UcxClientTransport::block_for_event(std::chrono::microseconds limit, std::uint64_t seen) {
  if (event_fd_ < 0) return false;
  std::unique_lock lock(mutex_);
  if (generation_ != seen) return true;  // progress at once
  ++idle_sleepers_;
  if (fd_sleeper_) {
    idle_.wait_for(lock, limit, [&] { return generation_ != seen; });
    --idle_sleepers_;
    return true;
  }
  const ucs_status_t status = ucp_worker_arm(worker_.get());
  if (status != UCS_OK) {  // UCS_ERR_BUSY: events are waiting, progress at once
    --idle_sleepers_;
    return status == UCS_ERR_BUSY;
  }
  fd_sleeper_ = true;
  lock.unlock();
  pollfd fd{event_fd_, POLLIN, 0};
  ::poll(&fd, 1, static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(limit).count()));
  lock.lock();
  fd_sleeper_ = false;
  --idle_sleepers_;
  ++generation_;  // woken (or timed out): the others look too
  if (idle_sleepers_ > 0) idle_.notify_all();
  return true;
}

void UcxClientTransport::abandon(const Completion& completion) {
  std::lock_guard lock(mutex_);
  pending_.forget(completion);
}

void UcxClientTransport::fail_pending(UcxChannel* channel, Errc code, const std::string& message) {
  pending_.fail_if([channel](const PendingAm& op) { return op.channel == channel; }, code, message);
}

namespace {
}  // namespace

// A rendezvous reply's data is still on its way when the reply arrives: the
// request keeps its credit until the data has landed, so that a client
// reading a large region over a slow link cannot pile up more undelivered
// replies at the server than its bound (reply_queue.hpp).
struct UcxClientTransport::ReadContext {
  CompletionPtr completion;
  UcxClientTransport* transport;
  std::uint64_t token;
};

void UcxClientTransport::read_received(void* request, ucs_status_t status, std::size_t /*length*/,
                                       void* user_data) {
  std::unique_ptr<ReadContext> ctx(static_cast<ReadContext*>(user_data));
  ucp_request_free(request);
  ctx->transport->return_credit(ctx->token);
  if (status == UCS_OK)
    ctx->completion->finish();
  else
    ctx->completion->finish(Errc::transport, std::string("receiving read data: UCX error: ") +
                                                 ucs_status_string(status));
}

void UcxClientTransport::return_credit(std::uint64_t token) {
  if (auto credited = credited_.find(token); credited != credited_.end()) {
    UcxChannel* channel = credited->second;
    credited_.erase(credited);
    channel->credit_returned();
  }
}

ucs_status_t UcxClientTransport::on_reply(void* arg, const void* header, std::size_t header_length,
                                          void* data, std::size_t length,
                                          const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxClientTransport*>(arg);
  const bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  AmReplyHeader h{};
  std::optional<PendingAm> pending;
  if (header_length == sizeof h) {
    std::memcpy(&h, header, sizeof h);
    pending = self->pending_.take(h.token);
  }
  // The credit comes back with the reply, or with its data (read_received).
  bool data_pending = false;
  struct CreditBack {
    UcxClientTransport* transport;
    std::uint64_t token;
    const bool& data_pending;
    ~CreditBack() {
      if (!data_pending) transport->return_credit(token);
    }
  } credit_back{self, header_length == sizeof h ? h.token : 0, data_pending};
  if (!pending) {  // malformed, or its op was abandoned
    if (rndv) ucp_am_data_release(self->worker_.get(), data);
    return UCS_OK;
  }
  PendingAm op = std::move(*pending);
  const std::string context = "server " + op.channel->peer_ + ": " + op.op;
  if (h.status != 0) {
    if (rndv) ucp_am_data_release(self->worker_.get(), data);
    const auto code = h.status > 0 && h.status <= static_cast<int>(kLastErrc)
                          ? static_cast<Errc>(h.status)
                          : Errc::protocol;
    op.completion->finish(code, context + " refused: " + errc_name(code));
    return UCS_OK;
  }
  if (op.frame != nullptr) {  // a call's reply frame
    if (rndv) {
      ucp_am_data_release(self->worker_.get(), data);
      op.completion->finish(Errc::protocol, context + ": reply frame came by rendezvous");
      return UCS_OK;
    }
    const auto* bytes = static_cast<const std::uint8_t*>(data);
    op.frame->assign(bytes, bytes + length);
    op.completion->finish();
    return UCS_OK;
  }
  if (length != op.length || (op.destination == nullptr && length != 0)) {
    if (rndv) ucp_am_data_release(self->worker_.get(), data);
    op.completion->finish(Errc::protocol, context + ": reply carries " + std::to_string(length) +
                                              " bytes, expected " + std::to_string(op.length));
    return UCS_OK;
  }
  if (length == 0) {
    op.completion->finish();
  } else if (!rndv) {
    std::memcpy(op.destination, data, length);
    op.completion->finish();
  } else {
    auto ctx = std::make_unique<ReadContext>(ReadContext{op.completion, self, h.token});
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = read_received;
    p.user_data = ctx.get();
    ucs_status_ptr_t request = ucp_am_recv_data_nbx(self->worker_.get(), data, op.destination, length, &p);
    if (request == nullptr) {
      op.completion->finish();
    } else if (UCS_PTR_IS_ERR(request)) {
      op.completion->finish(Errc::transport, context + ": UCX error: " +
                                                 ucs_status_string(UCS_PTR_STATUS(request)));
    } else {  // read_received finishes it and frees the request
      (void)ctx.release();
      data_pending = true;  // read_received returns the credit
    }
  }
  return UCS_OK;
}

// ---------------------------------------------------------------- channel

namespace {

ucp_ep_h create_endpoint(ucp_worker_h worker, const Bytes& address, ucp_err_handling_mode_t mode,
                         ucp_err_handler_cb_t on_error, void* arg, const std::string& peer) {
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_mode = mode;
  if (mode == UCP_ERR_HANDLING_MODE_PEER) {
    params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.err_handler.cb = on_error;
    params.err_handler.arg = arg;
  }
  ucp_ep_h ep = nullptr;
  check_ucx(ucp_ep_create(worker, &params, &ep), "server " + peer + ": creating a UCX endpoint");
  return ep;
}

// Closes an endpoint; a graceful close flushes, and a dead peer must not make it hang.
void close_endpoint(ucp_worker_h worker, ucp_ep_h ep, bool force) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t request = ucp_ep_close_nbx(ep, &p);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (ucp_request_check_status(request) == UCS_INPROGRESS && std::chrono::steady_clock::now() < deadline)
    ucp_worker_progress(worker);
  if (ucp_request_check_status(request) == UCS_INPROGRESS) ucp_request_cancel(worker, request);
  ucp_request_free(request);
}

// The UCX transports behind an endpoint's lanes, by purpose.
struct Lanes {
  std::set<std::string> rma, amo, am;
  bool put_lanes = false;

  // RMA that a NIC or the kernel does (verbs, CMA, shared memory), rather
  // than UCX's software emulation over TCP.
  //
  // Shared memory only, for now: over rc_verbs (tested on soft-RoCE in the
  // project's VM suite) UCX 1.13's put/get against smbd stall even with RMA
  // lanes listed, so verbs paths use the "am" protocol until the native verbs
  // transport replaces them; SMB_DATA_PROTOCOL=rma still forces RMA.
  bool native_rma() const {
    static const std::set<std::string> shared_memory{"cma", "posix", "sysv", "knem", "xpmem"};
    return put_lanes && !rma.empty() &&
           std::all_of(rma.begin(), rma.end(), [](const auto& t) { return shared_memory.contains(t); });
  }
  // Atomics that need no server CPU: a NIC's, or, on one host, UCX's
  // shared-memory lanes, which run the CPU's own atomic instruction on the
  // server's pool mapped into this process (the pool is UCX-allocated
  // shareable memory, see MemoryMap). Both are coherent with the atomics the
  // server runs for other clients (std::atomic_ref on the same words): one
  // cache-coherent CPU instruction either way. TCP's "atomics" are software
  // emulation, a round trip each, no better than ours.
  bool native_amo() const {
    static const std::set<std::string> shared_memory{"sysv", "posix", "xpmem"};
    static const std::set<std::string> software{"tcp", "cma", "knem", "self"};
    if (amo.empty() || std::any_of(amo.begin(), amo.end(), [](const auto& t) { return software.contains(t); }))
      return false;
    const bool on_host = std::any_of(amo.begin(), amo.end(), [](const auto& t) { return shared_memory.contains(t); });
    return !on_host || native_rma();
  }

  std::string summary() const {
    auto join = [](const std::set<std::string>& s) {
      std::string out;
      for (const auto& x : s) out += (out.empty() ? "" : ",") + x;
      return out.empty() ? std::string("none") : out;
    };
    return "rma: " + join(rma) + "; amo: " + join(amo) + "; am: " + join(am);
  }
};

Lanes lanes_of(ucp_ep_h ep) {
  // UCX 1.13 has no query for the transports behind an endpoint's lanes; its
  // own debug print names them, one "lane[i]: ... tl/dev ... purpose" line each.
  Lanes lanes;
  char* text = nullptr;
  std::size_t size = 0;
  FILE* stream = open_memstream(&text, &size);
  if (stream == nullptr) return lanes;
  ucp_ep_print_info(ep, stream);
  std::fclose(stream);
  const std::string info(text, size);
  std::free(text);
  static const std::regex lane(R"(lane\[\d+\]:\s+\d+:([A-Za-z0-9_]+)/)");
  std::istringstream lines(info);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, lane)) continue;
    // Purposes are words such as "rma", "rma_bw#0", "amo#1", "am".
    std::istringstream words(line.substr(static_cast<std::size_t>(m.position(0) + m.length(0))));
    for (std::string word; words >> word;) {
      const std::string purpose = word.substr(0, word.find('#'));
      if (purpose == "rma" || purpose == "rma_bw") lanes.rma.insert(m[1].str());
      if (purpose == "amo") lanes.amo.insert(m[1].str());
      if (purpose == "am" || purpose == "am_bw") lanes.am.insert(m[1].str());
    }
  }
  // UCX lists the protocols of its RMA lanes as "put[i]: ..." lines. Without
  // any (TCP; rc_verbs on rxe, which has only an rma_bw lane), put and get
  // fall back to UCX's software emulation, which needs the server to reply.
  lanes.put_lanes = info.find("put[") != std::string::npos;
  return lanes;
}

}  // namespace

// Chooses the endpoint and the data protocol for one server:
//  1. an endpoint with peer-failure detection; if its RMA is native (verbs),
//     one-sided RMA it is;
//  2. else UCX's shared-memory transports, which 1.13 offers only to
//     endpoints without peer-failure detection: if such an endpoint has native
//     RMA, it replaces the first one for everything (RMA, native atomics,
//     calls as shared-memory active messages), and the server's death is
//     learnt from its control connection instead (ClientCore probes it while
//     requests wait);
//  3. else (TCP) the "am" protocol on the first endpoint: UCX only emulates
//     RMA over TCP, a round trip per fragment, while active messages stream.
UcxChannel::UcxChannel(UcxClientTransport& transport, const Bytes& server_address, std::string peer,
                       DataProtocol protocol, std::span<const std::uint8_t> ticket)
    : transport_(transport), peer_(std::move(peer)), peer_name_(std::make_shared<const std::string>(peer_)) {
  std::unique_lock lock(transport_.mutex_);
  ucp_worker_h worker = transport_.worker_.get();
  try {
    ep_ = create_endpoint(worker, server_address, UCP_ERR_HANDLING_MODE_PEER, &UcxChannel::on_error, this, peer_);
  } catch (const Error&) {
    // Only transports without peer-failure detection reach it (UCX_TLS=sm,self,
    // say): shared memory alone is fine, the control connection tells of a
    // dead server. Anything else unreachable fails below, with UCX's reason.
    spdlog::info("libsmb: server {}: no UCX transport with peer-failure detection (UCX prints why above); "
                 "trying shared memory alone",
                 peer_);
  }
  Lanes lanes = ep_ != nullptr ? lanes_of(ep_) : Lanes{};
  if (ep_ == nullptr || (protocol != DataProtocol::am && !lanes.native_rma())) {
    ucp_ep_h unguarded =
        create_endpoint(worker, server_address, UCP_ERR_HANDLING_MODE_NONE, nullptr, nullptr, peer_);
    Lanes unguarded_lanes = lanes_of(unguarded);
    if (ep_ == nullptr || unguarded_lanes.native_rma()) {
      if (ep_ != nullptr) close_endpoint(worker, ep_, true);
      ep_ = unguarded;
      lanes = std::move(unguarded_lanes);
      peer_failure_detected_ = false;
    } else {
      close_endpoint(worker, unguarded, true);
    }
  }
  use_am_ = protocol == DataProtocol::am || (protocol == DataProtocol::automatic && !lanes.native_rma());
  bulk_rendezvous_ = use_am_ && lanes.am == std::set<std::string>{"tcp"};
  shared_memory_rma_ = !use_am_ && lanes.native_rma();
  am_atomics_ = use_am_ || !lanes.native_amo();
  lanes_ = lanes.summary();
  if (!peer_failure_detected_ || !ticket.empty()) wire_up_replies(ticket, lock);
  spdlog::debug("libsmb: server {} via {}", peer_, describe());
}

// Over shared memory the server has no way back to this worker until its
// first reply makes UCX connect back, which reconfigures this endpoint: with
// puts in flight on it that stalled them for seconds (UCX 1.13). So a ping
// makes that happen now, before any data op; it carries the session's
// ticket, without which the server serves nothing here. Called under the
// transport lock (`lock`), which the wait for the answer lets go of: a
// connect that spun holding it kept this process's other threads from
// their transfers, and on a busy host took the CPU from the server that
// has to answer (a repair's pulls into one smbd: 2-30 ms a connect, now
// 2-10).
void UcxChannel::wire_up_replies(std::span<const std::uint8_t> ticket, std::unique_lock<std::mutex>& lock) {
  auto done = std::make_shared<Completion>();
  done->expect();
  const std::uint64_t token = transport_.pending_.add(UcxClientTransport::PendingAm{done, this, nullptr, 0, "ping"});
  const AmPingHeader header{token};
  send_request(kAmPing, &header, sizeof header, ticket.empty() ? nullptr : ticket.data(), ticket.size(), token, done,
               "ping");
  const auto within = util::connect_timeout();  // SMB_CONNECT_TIMEOUT
  const auto deadline = std::chrono::steady_clock::now() + within;
  lock.unlock();
  {
    const PollingThread polling;
    while (!done->done() && std::chrono::steady_clock::now() < deadline) transport_.progress();
  }
  lock.lock();
  if (!done->done()) {
    transport_.pending_.forget(*done);
    close_endpoint(transport_.worker_.get(), ep_, true);
    throw Error(Errc::timeout, "server " + peer_ + ": UCX wire-up: no answer on the data channel within " +
                                   std::to_string(within.count()) + " ms (SMB_CONNECT_TIMEOUT; is smbd alive, and "
                                   "do UCX's transports reach it? UCX_TLS, smbctl doctor)");
  }
  try {
    done->throw_if_failed();
  } catch (const Error& e) {
    close_endpoint(transport_.worker_.get(), ep_, true);
    if (e.code() == Errc::permission_denied)
      throw Error(e.code(), "server " + peer_ + ": refused this client's data channel: its session's ticket is not "
                                                "admitted (the control session closed?): " + e.what());
    throw Error(e.code(), "server " + peer_ + ": wiring up the data channel: " + e.what());
  }
}

UcxChannel::~UcxChannel() {
  std::unique_lock lock(transport_.mutex_);
  std::erase_if(transport_.credited_, [this](const auto& entry) { return entry.second == this; });
  transport_.fail_pending(this, Errc::server_gone, "server " + peer_ + ": connection closed");
  if (ep_ != nullptr) close_endpoint(transport_.worker_.get(), ep_, health_.failed() || !peer_failure_detected_);
}

ChannelCaps UcxChannel::caps() const {
  return ChannelCaps{
      .native_atomics = !am_atomics_,
      .detects_peer_failure = peer_failure_detected_,
      .registration_helps = false,
      // Eager active messages, reassembled by UCX (rendezvous is off, see ucx_handles.cpp).
      .max_call_payload = 4u << 20,
      .same_host_memory = shared_memory_rma_,
  };
}

std::string UcxChannel::describe() const {
  return std::string("ucx, data protocol ") + (use_am_ ? "am" : "rma") + ", atomics " +
         (am_atomics_ ? "am" : "rma") + " (lanes " + lanes_ + ")";
}

// Under the transport lock: the first failure fails what the server owes.
void UcxChannel::fail(std::string reason) {
  if (!health_.fail(std::move(reason))) return;
  transport_.fail_pending(this, Errc::server_gone, health_.reason());
}

void UcxChannel::peer_lost(const std::string& reason) {
  std::lock_guard lock(transport_.mutex_);
  fail("server " + peer_ + " is gone: " + reason);
}

std::optional<std::string> UcxChannel::failure() const {
  std::lock_guard lock(transport_.mutex_);
  return health_.failure();
}

std::string UcxChannel::stall_report() const {
  std::lock_guard lock(transport_.mutex_);
  std::string text = "ucx to " + peer_ + " (" + lanes_ + "): " + std::to_string(in_flight_) +
                     " request(s) the server has not answered, " + std::to_string(queued_.size()) +
                     " waiting for a credit";
  if (health_.failed()) text += ", failed: " + health_.reason();
  if (!use_am_) text += " (one-sided ops are not counted here: UCX_LOG_LEVEL=debug shows UCX's own state)";
  return text;
}

void UcxChannel::on_error(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  // Runs inside ucp_worker_progress, i.e. with the transport lock held.
  auto* self = static_cast<UcxChannel*>(arg);
  const std::string reason =
      std::string("server ") + self->peer_ + " is gone: UCX reported " + ucs_status_string(status);
  if (!self->health_.failed()) spdlog::warn("libsmb: {}", reason);
  self->fail(reason);
}

std::unique_ptr<RemoteSegment> UcxChannel::attach(const SegmentDescriptor& segment) {
  std::lock_guard lock(transport_.mutex_);
  health_.throw_if_failed();
  auto& slot = rkeys_[segment.remote_key];
  auto shared = slot.lock();
  if (!shared) {
    std::erase_if(rkeys_, [](const auto& entry) { return entry.second.expired(); });
    ucp_rkey_h rkey = nullptr;
    check_ucx(ucp_ep_rkey_unpack(ep_, segment.remote_key.data(), &rkey),
              "server " + peer_ + ": unpacking the remote key of segment " + std::to_string(segment.id));
    shared = std::make_shared<const RkeyPtr>(rkey);
    rkeys_[segment.remote_key] = shared;
  }
  void* mapped = nullptr;
  if (shared_memory_rma_ && ucp_rkey_ptr(shared->get(), segment.address, &mapped) != UCS_OK) mapped = nullptr;
  if (mapped != nullptr) {
    // Map every page now, in one call, rather than one fault per 4 KiB page
    // on the first pass (best effort: kernels before 5.14 fault as before).
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto first = reinterpret_cast<std::uintptr_t>(mapped) / page * page;
    ::madvise(reinterpret_cast<void*>(first), reinterpret_cast<std::uintptr_t>(mapped) + segment.length - first,
              MADV_POPULATE_WRITE);
  }
  return std::make_unique<UcxRemoteSegment>(segment, std::move(shared), static_cast<std::byte*>(mapped),
                                            segment.length > util::last_level_cache_bytes());
}

void UcxChannel::send_am(unsigned id, RemoteSegment& seg, std::uint64_t offset, const void* src,
                         void* dst, std::size_t length, const CompletionPtr& completion, const char* op) {
  const bool reading = id == kAmRead;
  const bool bulk = bulk_rendezvous_ && length >= kBulkFrom;
  const std::uint64_t token =
      transport_.pending_.add(UcxClientTransport::PendingAm{completion, this, dst, reading ? length : 0, op});
  const AmRequestHeader header{token, seg.descriptor().id, offset, length};
  QueuedRequest request{reading && bulk ? kAmReadBulk : id, {}, sizeof header, reading ? nullptr : src,
                        reading ? 0 : length, {}, token, completion, op,
                        !reading && bulk ? UCP_AM_SEND_FLAG_RNDV : UCP_AM_SEND_FLAG_EAGER};
  std::memcpy(request.header.data(), &header, sizeof header);
  send_credited(std::move(request));
}

// Sends one request whose reply (matched by `token` in pending_) completes the op.
void UcxChannel::send_request(unsigned id, const void* header, std::size_t header_length, const void* payload,
                              std::size_t payload_length, std::uint64_t token,
                              const CompletionPtr& completion, const char* op, std::span<const std::byte> second,
                              std::uint32_t protocol) {
  auto owned = std::make_unique<UcxClientTransport::SendContext>();
  auto* ctx = owned.get();
  std::memcpy(ctx->header.data(), header, header_length);
  const void* am_header = ctx->header.data();
  ctx->token = token;
  ctx->transport = &transport_;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  if (protocol == UCP_AM_SEND_FLAG_RNDV && id == kAmCall) {
    // The frame rides in the header and the payload alone is the data, so
    // that the server receives it contiguous: UCX 1.13 moves that by a
    // zero-copy get (CMA over shared memory), a scattered one by fragments.
    const auto* first = static_cast<const std::byte*>(header);
    ctx->long_header.assign(first, first + header_length);
    const auto* frame = static_cast<const std::byte*>(payload);
    ctx->long_header.insert(ctx->long_header.end(), frame, frame + payload_length);
    am_header = ctx->long_header.data();
    header_length = ctx->long_header.size();
    payload = second.data();
    payload_length = second.size();
  } else if (!second.empty()) {  // two pieces, sent as one message without copying them together
    ctx->iov[0] = {const_cast<void*>(payload), payload_length};
    ctx->iov[1] = {const_cast<std::byte*>(second.data()), second.size()};
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
    p.datatype = UCP_DATATYPE_IOV;
    payload = ctx->iov.data();
    payload_length = ctx->iov.size();
  }
  p.flags = UCP_AM_SEND_FLAG_REPLY | protocol;
  p.user_data = ctx;
  p.cb.send = [](void* request, ucs_status_t status, void* user_data) {
    ucp_request_free(request);
    auto* c = static_cast<UcxClientTransport::SendContext*>(user_data);
    auto& transport = *c->transport;
    const std::uint64_t sent = c->token;
    transport.sends_.erase(sent);  // frees c
    if (status == UCS_OK) return;
    if (auto call = transport.credited_.find(sent); call != transport.credited_.end()) {
      UcxChannel* channel = call->second;  // a request that never left: its credit comes back now
      transport.credited_.erase(call);
      channel->credit_returned();
    }
    transport.pending_.fail(sent, Errc::transport, std::string("sending request: UCX error: ") + ucs_status_string(status));
  };
  ucs_status_ptr_t request =
      ucp_am_send_nbx(ep_, id, am_header, header_length, payload, payload_length, &p);
  if (request == nullptr) return;  // sent at once; `owned` frees the context, the reply completes the op
  if (UCS_PTR_IS_ERR(request)) {
    (void)transport_.pending_.take(token);
    completion->finish(Errc::transport, "server " + peer_ + ": " + op + ": UCX error: " +
                                            ucs_status_string(UCS_PTR_STATUS(request)));
    return;
  }
  transport_.sends_.emplace(token, std::move(owned));  // until the callback, which frees the request
}

void UcxChannel::call(std::span<const std::uint8_t> frame, std::span<const std::byte> payload, Bytes* reply,
                      const CompletionPtr& completion) {
  std::lock_guard lock(transport_.mutex_);
  if (!health_.admit(completion, "call")) return;
  const std::uint64_t token =
      transport_.pending_.add(UcxClientTransport::PendingAm{completion, this, nullptr, 0, "call", reply});
  const CallHeader header{token, static_cast<std::uint32_t>(frame.size()), 0};
  // A large payload (a vector op's x) by rendezvous, its frame in the
  // header: the server receives it straight into place, over shared memory
  // by one kernel copy (am_wire.hpp).
  const bool bulk = payload.size() >= kBulkFrom && frame.size() <= kLongHeaderFrame;
  QueuedRequest request{kAmCall, {},     sizeof header, frame.data(), frame.size(), payload, token,
                        completion, "call", bulk ? UCP_AM_SEND_FLAG_RNDV : UCP_AM_SEND_FLAG_EAGER};
  std::memcpy(request.header.data(), &header, sizeof header);
  send_credited(std::move(request));
}

// Under the transport lock.
void UcxChannel::send_credited(QueuedRequest request) {
  if (in_flight_ >= kCallCredits) return queued_.push_back(std::move(request));
  send_queued(request);
}

// Under the transport lock, with a credit free.
void UcxChannel::send_queued(const QueuedRequest& r) {
  ++in_flight_;
  transport_.credited_[r.token] = this;
  send_request(r.id, r.header.data(), r.header_length, r.payload, r.payload_length, r.token, r.completion, r.op,
               r.second, r.protocol);
  if (!transport_.pending_.contains(r.token) && transport_.credited_.erase(r.token) != 0)
    --in_flight_;  // refused at once: no reply will come
}

// Under the transport lock (inside progress).
void UcxChannel::credit_returned() {
  if (in_flight_ > 0) --in_flight_;
  while (in_flight_ < kCallCredits && !queued_.empty()) {
    QueuedRequest next = std::move(queued_.front());
    queued_.pop_front();
    if (transport_.pending_.contains(next.token)) send_queued(next);  // else failed or abandoned meanwhile
  }
}

// For ops that touch no UCX state (copies through the mapped pool): the lock only for the health check.
bool UcxChannel::admit_unlocked(const CompletionPtr& completion, const char* op) {
  std::lock_guard lock(transport_.mutex_);
  return health_.admit(completion, op);
}

void UcxChannel::put(RemoteSegment& seg, std::uint64_t offset, const void* src, std::size_t length,
                     const CompletionPtr& completion) {
  auto& remote = static_cast<UcxRemoteSegment&>(seg);
  if (std::byte* mapped = remote.mapped(offset, length)) {
    if (!admit_unlocked(completion, "write")) return;
    if (remote.streamed())
      util::stream_copy(mapped, src, length);  // no UCX state: other threads progress meanwhile
    else
      std::memcpy(mapped, src, length);
    // Stored before whatever the caller does once the write is done (a
    // flag another process polls, say), on any CPU.
    std::atomic_thread_fence(std::memory_order_release);
    return completion->finish();
  }
  std::lock_guard lock(transport_.mutex_);
  if (!health_.admit(completion, "write")) return;
  if (use_am_) return send_am(kAmWrite, seg, offset, src, nullptr, length, completion, "write");
  ucp_request_param_t none{};
  ucs_status_ptr_t request =
      ucp_put_nbx(ep_, src, length, remote.descriptor().address + offset, remote.rkey(), &none);
  if (UCS_PTR_IS_ERR(request)) {
    completion->finish(Errc::transport, "server " + peer_ + ": write: UCX error: " +
                                            ucs_status_string(UCS_PTR_STATUS(request)));
    return;
  }
  // Over shared memory a put that completed at once has stored the bytes in
  // the server's memory already (a copy into its mapping, or CMA): done.
  if (request == nullptr && shared_memory_rma_) return completion->finish();
  if (request != nullptr) ucp_request_free(request);
  // Elsewhere a put completes locally; the flush completes once the bytes are
  // in the server's memory, which is what "visible after write" promises.
  auto ctx = transport_.op_context(completion, 0, peer_name_, "write");
  ucp_request_param_t p = callback_param(ctx.get());
  track(ucp_ep_flush_nbx(ep_, &p), std::move(ctx));
}

void UcxChannel::get(RemoteSegment& seg, std::uint64_t offset, void* dst, std::size_t length,
                     const CompletionPtr& completion) {
  auto& remote = static_cast<UcxRemoteSegment&>(seg);
  if (const std::byte* mapped = remote.mapped(offset, length)) {
    if (!admit_unlocked(completion, "read")) return;
    std::memcpy(dst, mapped, length);
    std::atomic_thread_fence(std::memory_order_acquire);
    return completion->finish();
  }
  std::lock_guard lock(transport_.mutex_);
  if (!health_.admit(completion, "read")) return;
  if (use_am_) return send_am(kAmRead, seg, offset, nullptr, dst, length, completion, "read");
  auto ctx = transport_.op_context(completion, 0, peer_name_, "read");
  ucp_request_param_t p = callback_param(ctx.get());
  ucs_status_ptr_t request = ucp_get_nbx(ep_, dst, length, remote.descriptor().address + offset, remote.rkey(), &p);
  track(request, std::move(ctx));
}

void UcxChannel::atomic(AtomicOp op, RemoteSegment& seg, std::uint64_t offset, std::uint64_t operand,
                        std::uint64_t compare, std::uint64_t* result, const CompletionPtr& completion) {
  const char* what = op == AtomicOp::fetch_add ? "fetch-add" : "compare-swap";
  auto& remote = static_cast<UcxRemoteSegment&>(seg);
  std::byte* mapped = am_atomics_ ? nullptr : remote.mapped(offset, sizeof(std::uint64_t));
  if (mapped != nullptr && reinterpret_cast<std::uintptr_t>(mapped) % alignof(std::uint64_t) == 0) {
    // The locked instruction UCX's shared-memory atomic lane would run, on
    // the same mapping: sequentially consistent, as a NIC's atomics are
    // ordered with the ops around them.
    if (!admit_unlocked(completion, what)) return;
    std::atomic_ref<std::uint64_t> word(*reinterpret_cast<std::uint64_t*>(mapped));
    if (op == AtomicOp::fetch_add) {
      *result = word.fetch_add(operand);
    } else {
      std::uint64_t seen = compare;
      word.compare_exchange_strong(seen, operand);
      *result = seen;
    }
    return completion->finish();
  }
  std::lock_guard lock(transport_.mutex_);
  if (!health_.admit(completion, what)) return;
  if (am_atomics_) {
    const std::uint64_t token =
        transport_.pending_.add(UcxClientTransport::PendingAm{completion, this, result, sizeof(std::uint64_t), what});
    const AmAtomicHeader header{token, seg.descriptor().id, offset, static_cast<std::uint32_t>(op), 0,
                                operand, compare};
    QueuedRequest request{kAmAtomic, {}, sizeof header, nullptr, 0, {}, token, completion, what};
    std::memcpy(request.header.data(), &header, sizeof header);
    send_credited(std::move(request));
    return;
  }
  // UCX's compare-and-swap compares with `buffer` and swaps in the reply
  // buffer's value, which the old value then overwrites.
  const bool cas = op == AtomicOp::compare_swap;
  auto ctx = transport_.op_context(completion, cas ? compare : operand, peer_name_, what);
  ucp_request_param_t p = callback_param(ctx.get());
  p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
  p.datatype = ucp_dt_make_contig(sizeof(std::uint64_t));
  p.reply_buffer = result;
  if (cas) *result = operand;
  // Issued before `ctx` is handed on: an argument list could move it first.
  ucs_status_ptr_t request =
      ucp_atomic_op_nbx(ep_, op == AtomicOp::fetch_add ? UCP_ATOMIC_OP_ADD : UCP_ATOMIC_OP_CSWAP, &ctx->operand, 1,
                        remote.descriptor().address + offset, remote.rkey(), &p);
  track(request, std::move(ctx));
}

void UcxChannel::fetch_add(RemoteSegment& seg, std::uint64_t offset, std::uint64_t value,
                           std::uint64_t* old_value, const CompletionPtr& completion) {
  atomic(AtomicOp::fetch_add, seg, offset, value, 0, old_value, completion);
}

void UcxChannel::compare_swap(RemoteSegment& seg, std::uint64_t offset, std::uint64_t expected,
                              std::uint64_t desired, std::uint64_t* old_value,
                              const CompletionPtr& completion) {
  atomic(AtomicOp::compare_swap, seg, offset, desired, expected, old_value, completion);
}

}  // namespace smb::transport::ucx
