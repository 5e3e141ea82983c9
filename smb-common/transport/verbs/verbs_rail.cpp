#include "transport/verbs/verbs_rail.hpp"

#include "transport/verbs/verbs_calls.hpp"
#include "util/parse.hpp"

#include <unistd.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace smb::transport::verbs {
namespace {

constexpr std::uint64_t kRecvBit = 1ull << 32;  // wr_id of a receive: kRecvBit | slot
static_assert(kCallMessage <= kSlot, "a call is sent from one staging slot");
constexpr std::uint32_t kSignalEvery = 16;  // at most this many WRs per completion (selective signalling)

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
// Returns the event (acked when it goes), for its private data.
EventPtr expect_event(rdma_event_channel* channel, rdma_cm_event_type expected, const std::string& peer,
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
  if (type == expected) return event;
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

Rail::Rail(const sockaddr* server, const std::optional<sockaddr_storage>& source, const std::string& chose_by,
           const std::string& peer, std::span<const std::uint8_t> ticket, Clock::time_point deadline)
    : peer_(peer) {
  const std::string where = "server " + peer_;
  events_ = make_event_channel("libsmb");
  id_ = make_id(events_.get(), this, "libsmb");
  const auto left_ms = [&] {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return static_cast<int>(std::max<std::int64_t>(left.count(), 1));
  };
  if (rdma_resolve_addr(id_.get(), source ? reinterpret_cast<sockaddr*>(const_cast<sockaddr_storage*>(&*source)) : nullptr,
                        const_cast<sockaddr*>(server), left_ms()) != 0)
    throw_errno(where + ": rdma_resolve_addr", errno);
  expect_event(events_.get(), RDMA_CM_EVENT_ADDR_RESOLVED, peer_, deadline);
  check_port(id_->verbs, id_->port_num, "libsmb");
  if (rdma_resolve_route(id_.get(), left_ms()) != 0) {
    // ENODEV here: the route leaves through an interface without an RDMA
    // device, typically loopback (smbd listening on 127.0.0.1).
    if (errno == ENODEV)
      throw Error(Errc::unreachable, where + ": no RDMA device on the route to " + address_text(server) +
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
  const EventPtr established = expect_event(events_.get(), RDMA_CM_EVENT_ESTABLISHED, peer_, deadline);
  // Which of the server's ports accepted (a server of one port says nothing: 0).
  AcceptData accepted;
  const auto& conn = established->param.conn;
  if (conn.private_data != nullptr && conn.private_data_len >= sizeof accepted &&
      std::memcmp(conn.private_data, accepted.magic, sizeof accepted.magic) == 0) {
    std::memcpy(&accepted, conn.private_data, sizeof accepted);
    server_rail_ = accepted.rail;
  }
  if (server_rail_ >= kMaxRails)
    throw Error(Errc::protocol, where + ": accepted on its port " + std::to_string(server_rail_) + ", past the " +
                                    std::to_string(kMaxRails) + " a client stripes over");
}

Rail::~Rail() {
  if (id_) rdma_disconnect(id_.get());
}

sockaddr_storage Rail::local_address() const {
  sockaddr_storage out{};
  const sockaddr* local = rdma_get_local_addr(id_.get());
  std::memcpy(&out, local, local->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
  return out;
}

bool Rail::stalled(Clock::time_point now, std::chrono::milliseconds limit) const {
  return !failed() && free_slots_.size() < kDepth && now - progress_since_ > limit;
}

std::string Rail::stall_report() const {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  const int rc = ibv_query_qp(id_->qp, &attr, IBV_QP_STATE, &init);
  const auto idle = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_completion_);
  std::string text = "verbs QP " + std::to_string(id_->qp->qp_num) + " to " + peer_ + " via " + device_ + ": " +
                     (rc == 0 ? "state " + qp_state_name(attr.qp_state)
                              : std::string("ibv_query_qp failed: ") + std::strerror(rc)) +
                     ", " + std::to_string(kDepth - free_slots_.size()) + " work request(s) in flight, " +
                     std::to_string(backlog_.size()) + " queued, " + std::to_string(credits_used_) +
                     " call(s) unanswered, last completion " + std::to_string(idle.count()) + " ms ago";
  if (failure_) text += ", failed: " + failure_->message;
  return text;
}

void Rail::mark_failed(Errc code, std::string message) {
  if (failure_) return;
  failure_ = RailFailure{code, std::move(message)};
  // In the error state the QP flushes what is posted and takes no response
  // any more: nothing lands in a slot or in registered caller memory late.
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ibv_modify_qp(id_->qp, &attr, IBV_QP_STATE);
}

void Rail::evacuate(std::vector<Piece>& retry) {
  const std::string unknown = "server " + peer_ + ": its RDMA rail via " + device_ + " failed (" +
                              failure_->message + ") with this op in flight; the server may or may not have "
                              "applied it, so it is not repeated";
  for (auto& p : backlog_) retry.push_back(std::move(p));
  backlog_.clear();
  // Slots stay taken: nothing is posted on this QP again.
  for (auto& slot : in_flight_) {
    if (!slot || !slot->completion) continue;
    if (slot->repeatable()) {
      slot->lkey = 0;  // the next rail finds its own
      retry.push_back(std::move(*slot));
    }
    else if (slot->opcode != IBV_WR_SEND)  // a call's completion is its PendingCall's
      slot->completion->finish(failure_->code, unknown);
    slot.reset();
  }
  posted_.clear();
  calls_.fail_all(failure_->code, unknown);
}

// Fails everything queued or in flight. An RC QP that saw an error stays in
// the error state, so the rail is done for good.
void Rail::fail_all(Errc code, const std::string& reason) {
  for (auto& p : backlog_) p.completion->finish(code, reason);
  backlog_.clear();
  // Slots stay taken: the NIC may still flush into them, and nothing is posted again.
  for (auto& slot : in_flight_)
    if (slot && slot->completion && slot->opcode != IBV_WR_SEND)
      std::exchange(slot->completion, nullptr)->finish(code, reason);
  calls_.fail_all(code, reason);
}

void Rail::drop(const Completion& completion) {
  std::erase_if(backlog_, [&](const Piece& p) { return p.completion.get() == &completion; });
  // In flight: keep the slot until the NIC is done, but forget the caller.
  for (auto& slot : in_flight_)
    if (slot && slot->completion.get() == &completion) slot->completion = nullptr;
  calls_.forget(completion);
}

int Rail::poll() {
  if (failed()) return 0;
  // rdma_cm first: once the server is known gone, a failed completion (a
  // dying server's deregistered memory answers "remote access error") is
  // its going, server_gone, as callers expect of a dead server.
  std::optional<std::string> gone;
  for (;;) {
    rdma_cm_event* event = nullptr;
    if (rdma_get_cm_event(events_.get(), &event) != 0) break;
    const auto type = event->event;
    rdma_ack_cm_event(event);
    if (type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_DEVICE_REMOVAL)
      gone = "server " + peer_ + " is gone: rdma_cm reported " + rdma_event_str(type);
  }
  // Then what completed before: delivered, not repeated or failed.
  ibv_wc wc[16];
  const int n = ibv_poll_cq(cq_.get(), 16, wc);
  if (n > 0) last_completion_ = progress_since_ = Clock::now();
  for (int i = 0; i < n && !failed(); ++i) {
    if (wc[i].status != IBV_WC_SUCCESS) {
      if (gone) mark_failed(Errc::server_gone, *gone);
      else on_failed_completion(wc[i]);
      continue;
    }
    const auto slot = static_cast<std::uint32_t>(wc[i].wr_id);
    if (wc[i].wr_id & kRecvBit) {
      on_reply(slot, wc[i].byte_len);
      continue;
    }
    if (slot >= kDepth || !in_flight_[slot]) continue;
    // An RC send queue completes in order: this signalled WR's success means
    // every WR posted before it, signalled or not, is done too.
    while (!posted_.empty()) {
      const std::uint32_t done = posted_.front();
      posted_.pop_front();
      complete(done);
      if (done == slot) break;
    }
  }
  if (gone) mark_failed(Errc::server_gone, *gone);
  return std::max(n, 0);
}

// A work request failed: the QP is in the error state and the rail is done.
// The piece that failed is still in its slot, so evacuate() may repeat it.
void Rail::on_failed_completion(const ibv_wc& wc) {
  const Errc code = errc_of(wc.status);
  const bool receive = (wc.wr_id & kRecvBit) != 0;
  mark_failed(code, "server " + peer_ + (code == Errc::server_gone ? " is gone" : "") +
                        (receive ? ": receiving a reply failed: " : ": RDMA op failed: ") + ibv_wc_status_str(wc.status));
}

// The WR in `slot` succeeded: free the slot, deliver what it read, finish its op.
void Rail::complete(std::uint32_t slot) {
  if (!in_flight_[slot]) return;
  Piece piece = std::move(*in_flight_[slot]);
  in_flight_[slot].reset();
  free_slots_.push_back(slot);
  // Abandoned: the caller's memory is not ours any more. Calls: the reply finishes them.
  if (!piece.completion || piece.opcode == IBV_WR_SEND) return;
  const std::byte* staged = staging_.data() + std::size_t{slot} * kSlot;
  if (piece.opcode == IBV_WR_RDMA_READ) {
    if (piece.lkey == 0) std::memcpy(piece.dst, staged, piece.length);  // else it landed in place
  } else if (piece.atomic()) {  // the old value
    std::memcpy(piece.dst, staged, sizeof(std::uint64_t));
  }
  piece.completion->finish();
}

// Posts backlog pieces while slots (send-queue entries) are free. Selective
// signalling: a WR asks for a completion only every kSignalEvery WRs, when
// it is the last one queued, or when it takes the last free slot; its
// completion then frees its slot and those of the unsignalled WRs before it
// (poll). For RC a WRITE completes once its data is placed at the server,
// i.e. visible. The rules guarantee the newest WR posted is always
// signalled, so no op waits for a completion that never comes.
void Rail::pump() {
  while (!failed() && !backlog_.empty() && !free_slots_.empty()) {
    Piece& piece = backlog_.front();
    const bool send = piece.opcode == IBV_WR_SEND;
    if (send && credits_used_ >= kCallCredits) break;  // the server has no receive posted for more
    const std::uint32_t slot = free_slots_.back();
    std::byte* staged = staging_.data() + std::size_t{slot} * kSlot;
    const bool atomic = piece.atomic();
    std::uint32_t length = atomic ? 8u : piece.length;
    // Registered caller memory is used in place, with this rail's key for it.
    const std::uint32_t lkey = piece.lkey = piece.repeatable()
                                   ? registered(piece.opcode == IBV_WR_RDMA_WRITE ? static_cast<const void*>(piece.src)
                                                                                  : piece.dst,
                                                piece.length)
                                   : 0;
    if (piece.opcode == IBV_WR_RDMA_WRITE && lkey == 0) std::memcpy(staged, piece.src, piece.length);
    std::uint64_t token = 0;
    if (send) {
      token = calls_.add(PendingCall{piece.completion, piece.reply});
      const CallHeader header{token, static_cast<std::uint32_t>(piece.frame.size()), 0};
      std::memcpy(staged, &header, sizeof header);
      std::memcpy(staged + sizeof header, piece.frame.data(), piece.frame.size());
      const std::size_t head = sizeof header + piece.frame.size();
      if (piece.length != 0) std::memcpy(staged + head, piece.src, piece.length);
      length += static_cast<std::uint32_t>(head);
    }
    ibv_sge sge{reinterpret_cast<std::uint64_t>(staged), length, staging_mr_->lkey};
    if (lkey != 0) {
      const void* in_place = piece.opcode == IBV_WR_RDMA_WRITE ? static_cast<const void*>(piece.src) : piece.dst;
      sge.addr = reinterpret_cast<std::uint64_t>(in_place);
      sge.lkey = lkey;
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
    const std::uint32_t rkey = piece.rkeys[server_rail_];
    if (atomic) {
      wr.wr.atomic.remote_addr = piece.remote;
      wr.wr.atomic.rkey = rkey;
      wr.wr.atomic.compare_add = piece.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? piece.compare : piece.operand;
      wr.wr.atomic.swap = piece.operand;
    } else {
      wr.wr.rdma.remote_addr = piece.remote;
      wr.wr.rdma.rkey = rkey;
    }
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(id_->qp, &wr, &bad); rc != 0) {
      if (send) calls_.take(token);  // still in the backlog: the failure handles it
      mark_failed(Errc::transport, "server " + peer_ + ": ibv_post_send: " + std::strerror(rc));
      return;
    }
    if (free_slots_.size() == kDepth) progress_since_ = Clock::now();  // the stall clock starts now
    free_slots_.pop_back();
    posted_.push_back(slot);
    if (send) ++credits_used_;
    in_flight_[slot] = std::move(piece);
    backlog_.pop_front();
  }
}

void Rail::enqueue(Piece piece) {
  backlog_.push_back(std::move(piece));
  pump();
}

// ---------------------------------------------------------------- registered memory

void Rail::add_region(std::uint64_t handle, std::byte* base, std::size_t length) {
  // The whole pages: pinning works on pages anyway.
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<std::uintptr_t>(base) / page * page;
  const auto end = (reinterpret_cast<std::uintptr_t>(base) + length + page - 1) / page * page;
  // Local access only: the server never touches a client's memory.
  MrPtr mr = register_mr(pd_.get(), reinterpret_cast<void*>(first), end - first, IBV_ACCESS_LOCAL_WRITE, "libsmb");
  local_.insert_or_assign(base, LocalRegion{handle, length, std::move(mr)});
}

void Rail::remove_region(std::uint64_t handle) {
  std::erase_if(local_, [&](const auto& entry) { return entry.second.handle == handle; });
}

std::uint32_t Rail::registered(const void* p, std::size_t length) const {
  if (local_.empty()) return 0;
  const auto* begin = static_cast<const std::byte*>(p);
  auto it = local_.upper_bound(begin);  // the first region starting after p
  if (it == local_.begin()) return 0;
  --it;
  const auto offset = static_cast<std::size_t>(begin - it->first);
  return offset <= it->second.length && length <= it->second.length - offset ? it->second.mr->lkey : 0;
}

// ---------------------------------------------------------------- calls

// A reply landed in receive `slot`: finish its call (if still wanted), give
// the credit back and repost the receive.
void Rail::on_reply(std::uint32_t slot, std::size_t length) {
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
    mark_failed(Errc::transport, "server " + peer_ + ": ibv_post_recv failed");
  pump();  // a credit came back: queued calls may go
}

}  // namespace smb::transport::verbs
