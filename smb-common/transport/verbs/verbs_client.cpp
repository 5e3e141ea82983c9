#include "transport/verbs/verbs_client.hpp"

#include "transport/client_idle.hpp"
#include "transport/verbs/verbs_calls.hpp"
#include "util/parse.hpp"

#include <netdb.h>
#include <unistd.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace smb::transport::verbs {
namespace {

// Send-queue depth (= staging slots) and slot size: 64 x 128 KiB = 8 MiB of
// registered memory per server, enough to keep soft-RoCE and real NICs busy.
constexpr std::uint32_t kDepth = 64;
constexpr std::size_t kSlot = 128 * 1024;
constexpr std::uint64_t kRecvBit = 1ull << 32;  // wr_id of a receive: kRecvBit | slot
static_assert(kCallMessage <= kSlot, "a call is sent from one staging slot");
constexpr std::uint32_t kSignalEvery = 16;  // at most this many WRs per completion (selective signalling)

// The server's host from "host:port" (the control-plane peer).
std::string host_of(const std::string& peer) {
  const auto colon = peer.rfind(':');
  std::string host = colon == std::string::npos ? peer : peer.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return host;
}

// What an rdma_cm reject or unreachable status says, in words (IB CM
// reject reasons, IBTA 12.6.7.2; negative: an errno from the kernel).
std::string reject_reason(int status) {
  switch (status) {
    case 8:
      return "no rdma_cm listener at that port (invalid service ID): is smbd running there with --transport verbs?";
    case 28:
      return "the server's software refused it (consumer-defined reject)";
    case -ETIMEDOUT:
    case ETIMEDOUT:
      return "no answer within rdma_cm's retries: UDP port 4791 (RoCE v2) blocked between the hosts, the peer's "
             "port down, or a GID the peer cannot route back to";
    default:
      return "status " + std::to_string(status);
  }
}

// Waits for `expected` on a connecting id; anything else is a set-up failure
// whose message says what to check.
// The stages share one deadline (util::connect_timeout, SMB_CONNECT_TIMEOUT).
void expect_event(rdma_event_channel* channel, rdma_cm_event_type expected, const std::string& peer,
                  std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  EventPtr event = next_event(channel, std::max(left, std::chrono::milliseconds(1)));
  const std::string where = "server " + peer + ": ";
  if (!event)
    throw Error(Errc::timeout, where + "rdma_cm timed out waiting for " + rdma_event_str(expected) +
                                   " (within SMB_CONNECT_TIMEOUT, " + std::to_string(util::connect_timeout().count()) +
                                   " ms for the whole connect; is the server reachable over an RDMA-capable "
                                   "interface, UDP port 4791 open?)");
  const auto type = event->event;
  if (type == expected) return;
  switch (type) {
    case RDMA_CM_EVENT_ADDR_ERROR:
      throw Error(Errc::unreachable, where + "rdma_cm cannot resolve the address: no RDMA device is "
                                             "bound to an interface that reaches it (see 'rdma link'; "
                                             "soft-RoCE: 'rdma link add rxe0 type rxe netdev IFACE')");
    case RDMA_CM_EVENT_ROUTE_ERROR:
      throw Error(Errc::unreachable, where + "rdma_cm found no route: check the interface's IP "
                                             "configuration and that the port is up");
    case RDMA_CM_EVENT_REJECTED:
      if (event->param.conn.private_data_len >= sizeof kNotAdmitted &&
          std::memcmp(event->param.conn.private_data, kNotAdmitted, sizeof kNotAdmitted) == 0)
        throw Error(Errc::permission_denied, where + "refused this client's data channel: its session's ticket "
                                                     "is not admitted (the control session closed?)");
      throw Error(Errc::unreachable, where + "the RDMA connection was rejected: " + reject_reason(event->status) +
                                             " (is smbd running with --transport verbs, on the device it was "
                                             "reached through?)");
    case RDMA_CM_EVENT_UNREACHABLE:
      throw Error(Errc::unreachable, where + "the RDMA connect request got no answer: " +
                                             reject_reason(event->status));
    default:
      throw Error(Errc::unreachable, where + "RDMA connection set-up failed: " + rdma_event_str(type) +
                                             " (status " + std::to_string(event->status) + ")");
  }
}

Errc errc_of(ibv_wc_status status) {
  // The QP gave up on the peer (retries exhausted) or was torn down under us.
  return status == IBV_WC_RETRY_EXC_ERR || status == IBV_WC_RNR_RETRY_EXC_ERR ||
                 status == IBV_WC_WR_FLUSH_ERR || status == IBV_WC_RESP_TIMEOUT_ERR
             ? Errc::server_gone
             : Errc::transport;
}

}  // namespace

// ---------------------------------------------------------------- transport

VerbsClientTransport::VerbsClientTransport() = default;
VerbsClientTransport::~VerbsClientTransport() = default;

std::unique_ptr<Channel> VerbsClientTransport::connect(const Bytes& server_address, const std::string& peer,
                                                       std::span<const std::uint8_t> ticket) {
  return std::make_unique<VerbsChannel>(*this, decode_address(server_address, peer), peer, ticket);
}

void VerbsClientTransport::progress() {
  int done = 0;
  {
    std::lock_guard lock(mutex_);
    for (auto* c : channels_) {
      c->poll_cm_events();
      done += c->poll_completions();
      c->pump();
    }
  }
  yield_when_idle(done != 0);
}

void VerbsClientTransport::abandon(const Completion& completion) {
  std::lock_guard lock(mutex_);
  for (auto* c : channels_) c->drop(completion);
}

std::optional<std::uint64_t> VerbsClientTransport::register_memory(void* base, std::size_t length) {
  if (base == nullptr || length == 0) throw Error(Errc::invalid_argument, "register_memory: empty region");
  std::lock_guard lock(mutex_);
  const std::uint64_t handle = next_region_++;
  auto* bytes = static_cast<std::byte*>(base);
  try {
    for (auto* c : channels_) c->add_region(handle, bytes, length);
  } catch (...) {
    for (auto* c : channels_) c->remove_region(handle);
    throw;
  }
  regions_.emplace(handle, Region{bytes, length});
  return handle;
}

void VerbsClientTransport::unregister_memory(std::uint64_t handle) {
  std::lock_guard lock(mutex_);
  for (auto* c : channels_) c->remove_region(handle);
  regions_.erase(handle);
}

// ---------------------------------------------------------------- channel

VerbsChannel::VerbsChannel(VerbsClientTransport& transport, std::uint16_t port, std::string peer,
                           std::span<const std::uint8_t> ticket)
    : transport_(transport), peer_(std::move(peer)) {
  const std::string where = "server " + peer_;
  events_ = make_event_channel("libsmb");
  id_ = make_id(events_.get(), this, "libsmb");
  const auto deadline = std::chrono::steady_clock::now() + util::connect_timeout();
  const auto left_ms = [&] {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    return static_cast<int>(std::max<std::int64_t>(left.count(), 1));
  };

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string host = host_of(peer_);
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0)
    throw Error(Errc::unreachable, where + ": cannot resolve '" + host + "': " + gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> info(found, &::freeaddrinfo);
  std::string chose_by;
  auto source = choose_source(info->ai_addr, chose_by, ("libsmb: server " + peer_).c_str());
  if (rdma_resolve_addr(id_.get(), source ? reinterpret_cast<sockaddr*>(&*source) : nullptr, info->ai_addr,
                        left_ms()) != 0)
    throw_errno(where + ": rdma_resolve_addr", errno);
  expect_event(events_.get(), RDMA_CM_EVENT_ADDR_RESOLVED, peer_, deadline);
  check_port(id_->verbs, id_->port_num, "libsmb");
  if (rdma_resolve_route(id_.get(), left_ms()) != 0) {
    // ENODEV here: the route leaves through an interface without an RDMA
    // device, typically loopback (smbd listening on 127.0.0.1).
    if (errno == ENODEV)
      throw Error(Errc::unreachable, where + ": no RDMA device on the route to " + host +
                                         ": start smbd with --listen on the address of an "
                                         "RDMA-capable interface (not 127.0.0.1; see 'rdma link')");
    throw_errno(where + ": rdma_resolve_route", errno);
  }
  expect_event(events_.get(), RDMA_CM_EVENT_ROUTE_RESOLVED, peer_, deadline);

  ibv_context* context = id_->verbs;
  device_ = device_name(context);
  route_ = route_choice(id_.get()) + (chose_by.empty() ? "" : "; chosen by " + chose_by);
  spdlog::debug("verbs: to server {} via {}", peer_, route_);  // and in every path line (describe)
  pd_ = make_pd(context, "libsmb");
  cq_ = make_cq(context, static_cast<int>(kDepth + kCallCredits) + 1, "libsmb");
  staging_.resize(kDepth * kSlot);
  staging_mr_ = register_mr(pd_.get(), staging_.data(), staging_.size(), IBV_ACCESS_LOCAL_WRITE, "libsmb");
  replies_.resize(kCallCredits * kReplyMessage);
  replies_mr_ = register_mr(pd_.get(), replies_.data(), replies_.size(), IBV_ACCESS_LOCAL_WRITE, "libsmb");
  create_qp(id_.get(), pd_.get(), cq_.get(), kDepth, kCallCredits, "libsmb");
  for (std::uint32_t i = 0; i < kCallCredits; ++i)
    if (!post_recv(id_->qp, replies_mr_.get(), replies_.data() + std::size_t{i} * kReplyMessage, kReplyMessage,
                   kRecvBit | i))
      throw_errno(where + ": ibv_post_recv", errno);
  in_flight_.resize(kDepth);
  for (std::uint32_t i = kDepth; i > 0; --i) free_slots_.push_back(i - 1);

  ibv_device_attr attr{};
  if (ibv_query_device(context, &attr) != 0) throw_errno(where + ": ibv_query_device on " + device_, errno);
  rdma_conn_param param{};
  // Outstanding READs/atomics this QP may have at the server at once.
  param.initiator_depth = static_cast<std::uint8_t>(std::min(attr.max_qp_init_rd_atom, 16));
  param.responder_resources = 0;
  // Retries before a silent server fails ops with server_gone (~7 x 67 ms on timeout 14).
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  param.private_data = ticket.empty() ? nullptr : ticket.data();
  param.private_data_len = static_cast<std::uint8_t>(ticket.size());
  if (rdma_connect(id_.get(), &param) != 0) throw_errno(where + ": rdma_connect", errno);
  expect_event(events_.get(), RDMA_CM_EVENT_ESTABLISHED, peer_, deadline);

  std::lock_guard lock(transport_.mutex_);
  for (const auto& [handle, region] : transport_.regions_) add_region(handle, region.base, region.length);
  transport_.channels_.push_back(this);
  spdlog::debug("libsmb: server {} via {}", peer_, describe());
}

VerbsChannel::~VerbsChannel() {
  std::lock_guard lock(transport_.mutex_);
  std::erase(transport_.channels_, this);
  // Our own close: fail what is left without a "gone" warning.
  health_.fail("server " + peer_ + ": connection closed");
  fail(Errc::server_gone, health_.reason());
  if (id_) rdma_disconnect(id_.get());
}

std::string VerbsChannel::describe() const {
  return "verbs rdma via " + route_ + " (rc, one-sided read/write/atomics, calls by send/recv)";
}

void VerbsChannel::peer_lost(const std::string& reason) {
  std::lock_guard lock(transport_.mutex_);
  fail(Errc::server_gone, "server " + peer_ + " is gone: " + reason);
}

std::optional<std::string> VerbsChannel::failure() const {
  std::lock_guard lock(transport_.mutex_);
  return health_.failure();
}

namespace {
std::string qp_state_name(ibv_qp_state state) {
  switch (state) {
    case IBV_QPS_RESET: return "RESET";
    case IBV_QPS_INIT: return "INIT";
    case IBV_QPS_RTR: return "RTR";
    case IBV_QPS_RTS: return "RTS (connected)";
    case IBV_QPS_SQD: return "SQD";
    case IBV_QPS_SQE: return "SQE (a send failed)";
    case IBV_QPS_ERR: return "ERR (it completes nothing more)";
    default: return "unknown";
  }
}
}  // namespace

std::string VerbsChannel::stall_report() const {
  std::lock_guard lock(transport_.mutex_);
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  const int rc = ibv_query_qp(id_->qp, &attr, IBV_QP_STATE, &init);
  const auto idle = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                          last_completion_);
  std::string text = "verbs QP " + std::to_string(id_->qp->qp_num) + " to " + peer_ + " via " + device_ + ": " +
                     (rc == 0 ? "state " + qp_state_name(attr.qp_state)
                              : std::string("ibv_query_qp failed: ") + std::strerror(rc)) +
                     ", " + std::to_string(kDepth - free_slots_.size()) + " work request(s) in flight, " +
                     std::to_string(backlog_.size()) + " queued, " + std::to_string(credits_used_) +
                     " call(s) unanswered, last completion " + std::to_string(idle.count()) + " ms ago";
  if (health_.failed()) text += ", failed: " + health_.reason();
  return text;
}

// Fails everything queued or in flight. An RC QP that saw an error stays in
// the error state, so the channel is done for good.
void VerbsChannel::fail(Errc code, const std::string& message) {
  if (health_.fail(message) && code == Errc::server_gone) spdlog::warn("libsmb: {}", message);
  const std::string& reason = health_.reason();
  // A call's completion is its PendingCall's to finish, not its SEND's.
  for (auto& p : backlog_)
    if (p.opcode != IBV_WR_SEND) p.completion->finish(code, reason);
  backlog_.clear();
  // Slots stay taken: the NIC may still flush into them, and nothing is posted again.
  for (auto& slot : in_flight_)
    if (slot && slot->completion && slot->opcode != IBV_WR_SEND)
      std::exchange(slot->completion, nullptr)->finish(code, reason);
  calls_.fail_all(code, reason);
}

void VerbsChannel::drop(const Completion& completion) {
  std::erase_if(backlog_, [&](const Piece& p) { return p.completion.get() == &completion; });
  // In flight: keep the slot until the NIC is done, but forget the caller.
  for (auto& slot : in_flight_)
    if (slot && slot->completion.get() == &completion) slot->completion = nullptr;
  calls_.forget(completion);
}

void VerbsChannel::poll_cm_events() {
  for (;;) {
    rdma_cm_event* event = nullptr;
    if (rdma_get_cm_event(events_.get(), &event) != 0) return;
    const auto type = event->event;
    rdma_ack_cm_event(event);
    if (type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_DEVICE_REMOVAL)
      fail(Errc::server_gone, "server " + peer_ + " is gone: rdma_cm reported " + rdma_event_str(type));
  }
}

int VerbsChannel::poll_completions() {
  ibv_wc wc[16];
  const int n = ibv_poll_cq(cq_.get(), 16, wc);
  if (n > 0) last_completion_ = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    const auto slot = static_cast<std::uint32_t>(wc[i].wr_id);
    if (wc[i].wr_id & kRecvBit) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        if (!health_.failed()) fail(errc_of(wc[i].status), "server " + peer_ + ": receiving a reply failed: " +
                                                      ibv_wc_status_str(wc[i].status));
        continue;
      }
      on_reply(slot, wc[i].byte_len);
      continue;
    }
    if (slot >= kDepth || !in_flight_[slot]) continue;
    if (wc[i].status != IBV_WC_SUCCESS) {
      Piece piece = std::move(*in_flight_[slot]);
      in_flight_[slot].reset();
      const Errc code = errc_of(wc[i].status);
      const std::string message = "server " + peer_ + (code == Errc::server_gone ? " is gone" : "") +
                                  ": RDMA op failed: " + ibv_wc_status_str(wc[i].status);
      if (piece.completion && piece.opcode != IBV_WR_SEND) piece.completion->finish(code, message);
      fail(code, message);  // calls included
      continue;
    }
    // An RC send queue completes in order: this signalled WR's success means
    // every WR posted before it, signalled or not, is done too.
    while (!posted_.empty()) {
      const std::uint32_t done = posted_.front();
      posted_.pop_front();
      complete(done);
      if (done == slot) break;
    }
  }
  return std::max(n, 0);
}

// The WR in `slot` succeeded: free the slot, deliver what it read, finish its op.
void VerbsChannel::complete(std::uint32_t slot) {
  if (!in_flight_[slot]) return;
  Piece piece = std::move(*in_flight_[slot]);
  in_flight_[slot].reset();
  free_slots_.push_back(slot);
  // Abandoned: the caller's memory is not ours any more. Calls: the reply finishes them.
  if (!piece.completion || piece.opcode == IBV_WR_SEND) return;
  const std::byte* staged = staging_.data() + std::size_t{slot} * kSlot;
  if (piece.opcode == IBV_WR_RDMA_READ) {
    if (piece.lkey == 0) std::memcpy(piece.dst, staged, piece.length);  // else it landed in place
  } else if (piece.opcode != IBV_WR_RDMA_WRITE) {  // atomics: the old value
    std::memcpy(piece.dst, staged, sizeof(std::uint64_t));
  }
  piece.completion->finish();
}

// Posts backlog pieces while slots (send-queue entries) are free. Selective
// signalling: a WR asks for a completion only every kSignalEvery WRs, when
// it is the last one queued, or when it takes the last free slot; its
// completion then frees its slot and those of the unsignalled WRs before it
// (poll_completions). For RC a WRITE completes once its data is placed at
// the server, i.e. visible. The rules guarantee the newest WR posted is
// always signalled, so no op waits for a completion that never comes.
void VerbsChannel::pump() {
  while (!health_.failed() && !backlog_.empty() && !free_slots_.empty()) {
    Piece& piece = backlog_.front();
    const bool send = piece.opcode == IBV_WR_SEND;
    if (send && credits_used_ >= kCallCredits) break;  // the server has no receive posted for more
    const std::uint32_t slot = free_slots_.back();
    std::byte* staged = staging_.data() + std::size_t{slot} * kSlot;
    const bool atomic = piece.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || piece.opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
    std::uint32_t length = atomic ? 8u : piece.length;
    const bool direct = piece.lkey != 0;  // registered caller memory: no staging copy
    if (piece.opcode == IBV_WR_RDMA_WRITE && !direct) std::memcpy(staged, piece.src, piece.length);
    if (send) {
      std::memcpy(staged, piece.message.data(), piece.message.size());
      if (piece.length != 0) std::memcpy(staged + piece.message.size(), piece.src, piece.length);
      length += static_cast<std::uint32_t>(piece.message.size());
    }
    ibv_sge sge{reinterpret_cast<std::uint64_t>(staged), length, staging_mr_->lkey};
    if (direct) {
      const void* in_place = piece.opcode == IBV_WR_RDMA_WRITE ? static_cast<const void*>(piece.src) : piece.dst;
      sge.addr = reinterpret_cast<std::uint64_t>(in_place);
      sge.lkey = piece.lkey;
    }
    ibv_send_wr wr{};
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = piece.opcode;
    // (A call next in line may have to wait for a credit: do not leave this WR unsignalled behind it.)
    const bool signalled = ++unsignalled_ >= kSignalEvery || backlog_.size() == 1 || free_slots_.size() == 1 ||
                           backlog_[1].opcode == IBV_WR_SEND;
    if (signalled) {
      wr.send_flags = IBV_SEND_SIGNALED;
      unsignalled_ = 0;
    }
    if (atomic) {
      wr.wr.atomic.remote_addr = piece.remote;
      wr.wr.atomic.rkey = piece.rkey;
      wr.wr.atomic.compare_add = piece.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? piece.compare : piece.operand;
      wr.wr.atomic.swap = piece.operand;
    } else {
      wr.wr.rdma.remote_addr = piece.remote;
      wr.wr.rdma.rkey = piece.rkey;
    }
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(id_->qp, &wr, &bad); rc != 0) {
      fail(Errc::transport, "server " + peer_ + ": ibv_post_send: " + std::strerror(rc));
      return;
    }
    free_slots_.pop_back();
    posted_.push_back(slot);
    if (send) ++credits_used_;
    in_flight_[slot] = std::move(piece);
    backlog_.pop_front();
  }
}

void VerbsChannel::enqueue(Piece piece) {
  backlog_.push_back(std::move(piece));
  pump();
}

// Cuts an op into slot-sized pieces; each finishes the completion once.
void VerbsChannel::split(Piece piece, std::size_t length) {
  const std::size_t pieces = std::max<std::size_t>(1, (length + kSlot - 1) / kSlot);
  if (pieces > 1) piece.completion->expect(static_cast<int>(pieces - 1));
  for (std::size_t done = 0, i = 0; i < pieces; ++i, done += kSlot) {
    Piece p = piece;
    p.remote += done;
    if (p.src != nullptr) p.src += done;
    if (p.dst != nullptr) p.dst += done;
    p.length = static_cast<std::uint32_t>(std::min(kSlot, length - std::min(length, done)));
    backlog_.push_back(std::move(p));
  }
  pump();
}

std::unique_ptr<RemoteSegment> VerbsChannel::attach(const SegmentDescriptor& segment) {
  std::uint32_t rkey = 0;
  if (segment.remote_key.size() != sizeof rkey)
    throw Error(Errc::protocol, "server " + peer_ + ": segment " + std::to_string(segment.id) +
                                    " has no verbs rkey (is smbd running with --transport verbs?)");
  std::memcpy(&rkey, segment.remote_key.data(), sizeof rkey);
  std::lock_guard lock(transport_.mutex_);
  health_.throw_if_failed();
  return std::make_unique<VerbsRemoteSegment>(segment, rkey);
}

void VerbsChannel::put(RemoteSegment& seg, std::uint64_t offset, const void* src, std::size_t length,
                       const CompletionPtr& completion) {
  auto& remote = static_cast<VerbsRemoteSegment&>(seg);
  std::lock_guard lock(transport_.mutex_);
  if (!health_.admit(completion, "write")) return;
  Piece p{completion, IBV_WR_RDMA_WRITE, remote.descriptor().address + offset, remote.rkey(),
          static_cast<const std::byte*>(src), nullptr, 0, 0, 0};
  p.lkey = registered(src, length);
  split(std::move(p), length);
}

void VerbsChannel::get(RemoteSegment& seg, std::uint64_t offset, void* dst, std::size_t length,
                       const CompletionPtr& completion) {
  auto& remote = static_cast<VerbsRemoteSegment&>(seg);
  std::lock_guard lock(transport_.mutex_);
  if (!health_.admit(completion, "read")) return;
  Piece p{completion, IBV_WR_RDMA_READ, remote.descriptor().address + offset, remote.rkey(),
          nullptr, static_cast<std::byte*>(dst), 0, 0, 0};
  p.lkey = registered(dst, length);
  split(std::move(p), length);
}

// `operand` is the value to add or to swap in; `compare` is compare-swap's expected value.
void VerbsChannel::atomic(ibv_wr_opcode opcode, const char* what, RemoteSegment& seg, std::uint64_t offset,
                          std::uint64_t operand, std::uint64_t compare, std::uint64_t* old_value,
                          const CompletionPtr& completion) {
  auto& remote = static_cast<VerbsRemoteSegment&>(seg);
  std::lock_guard lock(transport_.mutex_);
  if (!health_.admit(completion, what)) return;
  // RDMA atomics need an 8-byte aligned remote address.
  if ((remote.descriptor().address + offset) % 8 != 0)
    return completion->finish(Errc::invalid_argument, std::string(what) + ": offset is not 8-byte aligned");
  enqueue(Piece{completion, opcode, remote.descriptor().address + offset, remote.rkey(), nullptr,
                reinterpret_cast<std::byte*>(old_value), 8, operand, compare});
}

void VerbsChannel::fetch_add(RemoteSegment& seg, std::uint64_t offset, std::uint64_t value,
                             std::uint64_t* old_value, const CompletionPtr& completion) {
  atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, "fetch-add", seg, offset, value, 0, old_value, completion);
}

void VerbsChannel::compare_swap(RemoteSegment& seg, std::uint64_t offset, std::uint64_t expected,
                                std::uint64_t desired, std::uint64_t* old_value,
                                const CompletionPtr& completion) {
  atomic(IBV_WR_ATOMIC_CMP_AND_SWP, "compare-swap", seg, offset, desired, expected, old_value, completion);
}

// ---------------------------------------------------------------- registered memory

void VerbsChannel::add_region(std::uint64_t handle, std::byte* base, std::size_t length) {
  // The whole pages: pinning works on pages anyway.
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<std::uintptr_t>(base) / page * page;
  const auto end = (reinterpret_cast<std::uintptr_t>(base) + length + page - 1) / page * page;
  // Local access only: the server never touches a client's memory.
  MrPtr mr = register_mr(pd_.get(), reinterpret_cast<void*>(first), end - first, IBV_ACCESS_LOCAL_WRITE, "libsmb");
  local_.insert_or_assign(base, LocalRegion{handle, length, std::move(mr)});
}

void VerbsChannel::remove_region(std::uint64_t handle) {
  std::erase_if(local_, [&](const auto& entry) { return entry.second.handle == handle; });
}

std::uint32_t VerbsChannel::registered(const void* p, std::size_t length) const {
  const auto* begin = static_cast<const std::byte*>(p);
  auto it = local_.upper_bound(begin);  // the first region starting after p
  if (it == local_.begin()) return 0;
  --it;
  const auto offset = static_cast<std::size_t>(begin - it->first);
  return offset <= it->second.length && length <= it->second.length - offset ? it->second.mr->lkey : 0;
}

// ---------------------------------------------------------------- calls

ChannelCaps VerbsChannel::caps() const {
  return ChannelCaps{
      .native_atomics = true,
      // An RC QP errors out when the server stops answering, and rdma_cm
      // reports its disconnect: no need to watch the control connection.
      .detects_peer_failure = true,
      .registration_helps = true,
      .max_call_payload = kCallMessage - sizeof(CallHeader) - kCallFrameRoom,
  };
}

void VerbsChannel::call(std::span<const std::uint8_t> frame, std::span<const std::byte> payload, Bytes* reply,
                        const CompletionPtr& completion) {
  std::lock_guard lock(transport_.mutex_);
  if (!health_.admit(completion, "call")) return;
  if (frame.size() > kCallFrameRoom || payload.size() > caps().max_call_payload)
    return completion->finish(Errc::invalid_argument, "server " + peer_ + ": call too large for one message");
  const std::uint64_t token = calls_.add(PendingCall{completion, reply});
  Piece p{completion, IBV_WR_SEND, 0, 0, payload.data(), nullptr, static_cast<std::uint32_t>(payload.size()), 0, 0};
  const CallHeader header{token, static_cast<std::uint32_t>(frame.size()), 0};
  p.message.resize(sizeof header + frame.size());
  std::memcpy(p.message.data(), &header, sizeof header);
  std::memcpy(p.message.data() + sizeof header, frame.data(), frame.size());
  enqueue(std::move(p));
}

// A reply landed in receive `slot`: finish its call (if still wanted), give
// the credit back and repost the receive.
void VerbsChannel::on_reply(std::uint32_t slot, std::size_t length) {
  std::byte* message = replies_.data() + std::size_t{slot} * kReplyMessage;
  if (credits_used_ > 0) --credits_used_;
  CallHeader header{};
  if (length >= sizeof header) {
    std::memcpy(&header, message, sizeof header);
    if (auto call = calls_.take(header.token)) {
      if (header.frame_length > length - sizeof header) {
        call->completion->finish(Errc::protocol, "server " + peer_ + ": truncated call reply");
      } else {
        const auto* bytes = reinterpret_cast<const std::uint8_t*>(message) + sizeof header;
        call->reply->assign(bytes, bytes + header.frame_length);
        call->completion->finish();
      }
    }
  }
  if (!post_recv(id_->qp, replies_mr_.get(), message, kReplyMessage, kRecvBit | slot))
    fail(Errc::transport, "server " + peer_ + ": ibv_post_recv failed");
  pump();  // a credit came back: queued calls may go
}

}  // namespace smb::transport::verbs
