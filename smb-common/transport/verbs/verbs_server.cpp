#include "transport/verbs/verbs_server.hpp"

#include "transport/call_wire.hpp"
#include "transport/idle_spin.hpp"
#include "transport/verbs/verbs_calls.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

namespace smb::transport::verbs {
namespace {
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC;
constexpr std::uint32_t kReplyDepth = 16;            // reply SENDs in flight per connection
constexpr std::uint64_t kRecvBit = 1ull << 32;       // wr_id of a receive: kRecvBit | slot
}  // namespace

// One client's QP, the CQ both its queues report to, its posted receives
// (calls) and its reply send slots. Destroyed bottom-up: the id and its QP
// first, then the memory and the CQ they use.
struct VerbsServerTransport::Connection {
  CqPtr cq;
  std::vector<std::byte> receives;  // kCallCredits x kCallMessage
  MrPtr receives_mr;
  std::vector<std::byte> sends;  // kReplyDepth x kReplyMessage
  MrPtr sends_mr;
  std::vector<std::uint32_t> free_sends;
  std::deque<std::pair<std::uint64_t, Bytes>> waiting;  // replies waiting for a send slot
  ReplyBacklog backlog;  // waiting and posted replies, bounded (reply_queue.hpp)
  IdPtr id;
  AdmittedTicket ticket;  // what its connect request presented
  bool dropped = false;   // disconnected for a closed session; rdma_cm ends it

  std::byte* receive(std::uint32_t slot) { return receives.data() + std::size_t{slot} * kCallMessage; }
  bool repost(std::uint32_t slot) {
    return post_recv(id->qp, receives_mr.get(), receive(slot), kCallMessage, kRecvBit | slot);
  }
};

VerbsRegistration::VerbsRegistration(const std::vector<ibv_pd*>& pds, void* base, std::size_t length) {
  for (ibv_pd* pd : pds) {
    mrs_.push_back(register_mr(pd, base, length, kAccess, "smbd"));
    const std::uint32_t rkey = mrs_.back()->rkey;
    rkeys_.resize(rkeys_.size() + sizeof rkey);
    std::memcpy(rkeys_.data() + rkeys_.size() - sizeof rkey, &rkey, sizeof rkey);
  }
}

namespace {
// The ports clients stripe over: every active one SMB_RDMA_DEVICE allows
// that has an address; where none has (or to keep the checks and errors of
// a single device), the one pick_device names.
std::vector<LocalPort> server_ports() {
  ibv_context* first = pick_device("smbd");  // throws naming the fix: no device, unknown name, port down
  auto ports = local_ports("smbd");
  if (ports.size() > kMaxRails) ports.resize(kMaxRails);
  if (ports.empty()) ports.push_back(LocalPort{first, 1, {}});
  return ports;
}
}  // namespace

std::vector<VerbsServerTransport::ServerRail> VerbsServerTransport::make_rails() {
  std::vector<ServerRail> rails;
  for (auto& port : server_ports())
    rails.push_back(ServerRail{port, make_pd(port.context, "smbd"), make_comp_channel(port.context, "smbd")});
  return rails;
}

// The devices are opened (rails_) before the rdma_cm event channel, so
// that at exit the kernel closes the devices' files first, as it always
// did: a client writing into a dying smbd then sees the disconnect, not
// "remote access error" from memory already deregistered, first (seen in
// the VM as a replicated write failing instead of losing a copy).
VerbsServerTransport::VerbsServerTransport()
    : rails_(make_rails()), events_(make_event_channel("smbd")), listener_(make_id(events_.get(), this, "smbd")) {
  // Every address, any free port: the port travels in address() and clients
  // dial the host they reach the control plane on.
  sockaddr_in any{};
  any.sin_family = AF_INET;
  if (rdma_bind_addr(listener_.get(), reinterpret_cast<sockaddr*>(&any)) != 0)
    throw_errno("smbd: rdma_bind_addr", errno);
  if (rdma_listen(listener_.get(), 64) != 0) throw_errno("smbd: rdma_listen", errno);
  ServerAddress address{ntohs(rdma_get_src_port(listener_.get())), {}};
  std::string ports;
  for (const auto& rail : rails_) {
    address.rails.push_back(rail.port.address);
    ports += (ports.empty() ? "" : ", ") + device_name(rail.port.context) + " port " +
             std::to_string(rail.port.port) +
             (rail.port.address.ss_family != 0
                  ? " (" + address_text(reinterpret_cast<const sockaddr*>(&rail.port.address)) + ")"
                  : "");
  }
  address_ = encode_address(address);
  spdlog::info("verbs: {} {}, rdma_cm port {}", rails_.size() > 1 ? "rails" : "device", ports, address.port);
}

const VerbsServerTransport::ServerRail* VerbsServerTransport::rail_of(const rdma_cm_id* id) const {
  for (const auto& rail : rails_)
    if (rail.port.context == id->verbs && (rails_.size() == 1 || rail.port.port == id->port_num)) return &rail;
  return nullptr;
}

VerbsServerTransport::~VerbsServerTransport() {
  stop();
  // Disconnect first so clients hear of it now, not after their QP times out.
  for (auto& [id, owned] : connections_) rdma_disconnect(id);
}

std::unique_ptr<Registration> VerbsServerTransport::register_memory(void* base, std::size_t length) {
  std::vector<ibv_pd*> pds;
  for (const auto& rail : rails_) pds.push_back(rail.pd.get());
  return std::make_unique<VerbsRegistration>(pds, base, length);
}

void VerbsServerTransport::start(SegmentResolver /*resolver*/, CallHandler calls, const ServerTuning& tuning,
                                 ChannelAdmission admission) {
  // Data ops are one-sided: nothing resolves segments on the server.
  calls_ = std::move(calls);
  tuning_ = tuning;
  admission_ = std::move(admission);
  thread_.start([this](const std::stop_token& stop) { event_loop(stop); });
}

void VerbsServerTransport::stop() { thread_.stop(); }

// Sleeps on the rdma_cm event channel, the completion channel and the wake
// fd: the thread wakes for connection set-up and tear-down, calls, and
// replies to send, never per one-sided op. While it spins (IdleSpin) it also
// polls every connection's completion queue itself, without waiting for the
// completion channel's event.
void VerbsServerTransport::event_loop(const std::stop_token& stop) {
  IdleSpin idle(tuning_);
  bool worked = false;
  std::vector<pollfd> fds(2 + rails_.size());
  while (!stop.stop_requested()) {
    const bool sleep = idle.may_sleep(worked);
    worked = false;
    fds[0] = {events_->fd, POLLIN, 0};
    fds[1] = {thread_.wake_fd(), POLLIN, 0};
    for (std::size_t i = 0; i < rails_.size(); ++i) fds[2 + i] = {rails_[i].completions->fd, POLLIN, 0};
    if (::poll(fds.data(), fds.size(), sleep ? 500 : 0) > 0 && sleep) idle.woke();
    for (;;) {
      rdma_cm_event* raw = nullptr;
      if (rdma_get_cm_event(events_.get(), &raw) != 0) break;  // EAGAIN: drained
      const rdma_cm_event event = *raw;
      // Ack before acting: destroying an id waits for its events' acks.
      rdma_ack_cm_event(raw);
      worked = true;
      try {
        on_event(event);
      } catch (const std::exception& e) {
        spdlog::error("verbs: {}", e.what());
      }
    }
    for (const auto& rail : rails_)
      for (;;) {
        ibv_cq* cq = nullptr;
        void* owner = nullptr;
        if (ibv_get_cq_event(rail.completions.get(), &cq, &owner) != 0) break;  // EAGAIN: drained
        ibv_ack_cq_events(cq, 1);
        ibv_req_notify_cq(cq, 0);  // re-armed before polling, so no completion slips between
        worked |= poll_connection(*static_cast<Connection*>(owner));
      }
    if (!sleep)
      for (auto& [id, connection] : connections_) worked |= poll_connection(*connection);
    if (fds[1].revents & POLLIN) thread_.clear_wake();
    worked |= send_replies();
    if (revoked_since(admission_, revocations_seen_)) drop_revoked();
  }
}

bool VerbsServerTransport::poll_connection(Connection& c) {
  bool any = false;
  ibv_wc wc[16];
  for (int n; (n = ibv_poll_cq(c.cq.get(), 16, wc)) > 0;) {
    any = true;
    for (int i = 0; i < n; ++i) {
      // A failed completion means the connection is ending; rdma_cm reports that.
      if (wc[i].status != IBV_WC_SUCCESS) {
        if (wc[i].status != IBV_WC_WR_FLUSH_ERR)
          spdlog::debug("verbs: completion failed: {}", ibv_wc_status_str(wc[i].status));
        continue;
      }
      const auto slot = static_cast<std::uint32_t>(wc[i].wr_id);
      if (wc[i].wr_id & kRecvBit) {
        on_call(c, slot, wc[i].byte_len);
      } else {
        c.free_sends.push_back(slot);
        c.backlog.delivered();
        if (!c.waiting.empty()) {
          auto [token, frame] = std::move(c.waiting.front());
          c.waiting.pop_front();
          post_reply(c, token, frame);
        }
      }
    }
  }
  return any;
}

// A call arrived in receive `slot`: copy it out, repost the receive (the
// client's credit), and hand it to the handler, whose answer may come from
// any thread and finds the connection only if it still exists.
void VerbsServerTransport::on_call(Connection& c, std::uint32_t slot, std::size_t length) {
  const auto* message = reinterpret_cast<const std::uint8_t*>(c.receive(slot));
  CallHeader header{};
  const bool whole = length >= sizeof header && length <= kCallMessage;
  if (whole) std::memcpy(&header, message, sizeof header);
  // A frame length past the message leaves the frame empty: the handler answers that with an error.
  auto parts = whole ? split_call({message + sizeof header, length - sizeof header}, header.frame_length)
                     : std::nullopt;
  if (!parts) parts.emplace();
  if (!c.repost(slot)) spdlog::warn("verbs: cannot repost a receive; that client's calls will stall");
  if (!whole) return;  // no token to answer to
  std::weak_ptr<Connection> weak = connections_.at(c.id.get());
  calls_(std::move(parts->frame), std::move(parts->payload), c.ticket.scope(),
         [this, weak, token = header.token](Bytes reply) { replies_.push(weak, token, std::move(reply)); });
}

bool VerbsServerTransport::send_replies() {
  auto replies = replies_.take();
  for (auto& r : replies)
    if (auto c = r.peer.lock()) send_reply(*c, r.token, std::move(r.frame));
  return !replies.empty();
}

void VerbsServerTransport::send_reply(Connection& c, std::uint64_t token, Bytes frame) {
  if (sizeof(CallHeader) + frame.size() > kReplyMessage) {
    spdlog::error("verbs: a reply of {} bytes does not fit a reply message; dropped", frame.size());
    return;
  }
  if (!c.backlog.admit()) {
    spdlog::warn("verbs: a client does not take its call replies ({} undelivered); disconnecting it",
                 c.backlog.undelivered());
    rdma_disconnect(c.id.get());
    return;
  }
  if (c.free_sends.empty()) {
    c.waiting.emplace_back(token, std::move(frame));
    return;
  }
  post_reply(c, token, frame);
}

// Posts an admitted reply into a free send slot.
void VerbsServerTransport::post_reply(Connection& c, std::uint64_t token, const Bytes& frame) {
  const std::uint32_t slot = c.free_sends.back();
  std::byte* buffer = c.sends.data() + std::size_t{slot} * kReplyMessage;
  const CallHeader header{token, static_cast<std::uint32_t>(frame.size()), 0};
  std::memcpy(buffer, &header, sizeof header);
  std::memcpy(buffer + sizeof header, frame.data(), frame.size());
  ibv_sge sge{reinterpret_cast<std::uint64_t>(buffer), static_cast<std::uint32_t>(sizeof header + frame.size()),
              c.sends_mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(c.id->qp, &wr, &bad); rc != 0) {
    spdlog::debug("verbs: posting a reply failed: {}", std::strerror(rc));
    c.backlog.delivered();  // never will be: the connection is ending
    return;
  }
  c.free_sends.pop_back();
}

void VerbsServerTransport::on_event(const rdma_cm_event& event) {
  switch (event.event) {
    case RDMA_CM_EVENT_CONNECT_REQUEST:
      accept(event.id, event.param.conn);
      break;
    case RDMA_CM_EVENT_ESTABLISHED:
      spdlog::debug("verbs: client connected");
      break;
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
      spdlog::debug("verbs: client connection ends: {}", rdma_event_str(event.event));
      connections_.erase(event.id);  // destroys its QP and id
      break;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      spdlog::error("verbs: RDMA device {} was removed; its clients' rails fail", device_name(event.id->verbs));
      break;
    default:
      break;
  }
}

// A session closed: its connections are disconnected, so that nothing --
// not even a one-sided op with a key it still holds -- reaches memory
// through them any more.
void VerbsServerTransport::drop_revoked() {
  for (auto& [id, c] : connections_)
    if (!c->dropped && !c->ticket.admitted(admission_)) {
      c->dropped = true;
      spdlog::info("verbs: disconnecting a client whose control session closed");
      rdma_disconnect(id);
    }
}

void VerbsServerTransport::accept(rdma_cm_id* id, const rdma_conn_param& requested) {
  IdPtr owned(id);  // rejected or not, this id is ours to destroy
  const ServerRail* rail = rail_of(id);
  if (rail == nullptr) {
    std::string registered;
    for (const auto& r : rails_) registered += (registered.empty() ? "" : ", ") + device_name(r.port.context);
    spdlog::warn("verbs: refusing a connection on device {} port {}: smbd registered its memory with {} "
                 "(choose with SMB_RDMA_DEVICE)", device_name(id->verbs), id->port_num, registered);
    rdma_reject(id, nullptr, 0);
    return;
  }
  // rdma_cm may pad the private data: the ticket is its first kTicketLength bytes.
  const auto* presented = static_cast<const std::uint8_t*>(requested.private_data);
  AdmittedTicket ticket(requested.private_data_len >= kTicketLength && presented != nullptr
                            ? std::span(presented, kTicketLength)
                            : std::span<const std::uint8_t>());
  if (!ticket.admitted(admission_)) {
    spdlog::warn("verbs: refusing a connection whose ticket no open control session was given "
                 "(a client that did not authenticate, or whose session closed)");
    rdma_reject(id, kNotAdmitted, sizeof kNotAdmitted);
    return;
  }
  auto c = std::make_shared<Connection>();
  c->ticket = std::move(ticket);
  ibv_pd* pd = rail->pd.get();
  c->cq = make_cq(id->verbs, static_cast<int>(kCallCredits + kReplyDepth), "smbd", rail->completions.get(), c.get());
  create_qp(id, pd, c->cq.get(), kReplyDepth, kCallCredits, "smbd");
  c->id = std::move(owned);
  c->receives.resize(kCallCredits * kCallMessage);
  c->receives_mr = register_mr(pd, c->receives.data(), c->receives.size(), IBV_ACCESS_LOCAL_WRITE, "smbd");
  c->sends.resize(kReplyDepth * kReplyMessage);
  c->sends_mr = register_mr(pd, c->sends.data(), c->sends.size(), 0, "smbd");
  for (std::uint32_t i = 0; i < kReplyDepth; ++i) c->free_sends.push_back(i);
  // Receives are posted before the client can send its first call.
  for (std::uint32_t i = 0; i < kCallCredits; ++i)
    if (!c->repost(i)) throw_errno("smbd: ibv_post_recv", errno);
  if (ibv_req_notify_cq(c->cq.get(), 0) != 0) throw_errno("smbd: ibv_req_notify_cq", errno);
  ibv_device_attr attr{};
  if (ibv_query_device(id->verbs, &attr) != 0) throw_errno("smbd: ibv_query_device", errno);
  rdma_conn_param param{};
  // The client's READs and atomics are served by our responder resources.
  // rdma_cm reports the request from our side: its responder_resources is
  // the client's initiator depth. Zero here and the client's READs stall.
  param.responder_resources = static_cast<std::uint8_t>(
      std::min<int>(requested.responder_resources, attr.max_qp_rd_atom));
  param.initiator_depth = 0;
  param.rnr_retry_count = 7;
  // Which rail accepted: the client uses that rail's rkey of each segment.
  AcceptData accepted;
  accepted.rail = static_cast<std::uint8_t>(rail - rails_.data());
  param.private_data = &accepted;
  param.private_data_len = sizeof accepted;
  if (rdma_accept(id, &param) != 0) throw_errno("smbd: rdma_accept", errno);
  connections_.emplace(id, std::move(c));
}

}  // namespace smb::transport::verbs
