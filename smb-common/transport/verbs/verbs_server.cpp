#include "transport/verbs/verbs_server.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

namespace smb::transport::verbs {
namespace {
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC;
}  // namespace

VerbsRegistration::VerbsRegistration(ibv_pd* pd, void* base, std::size_t length)
    : mr_(register_mr(pd, base, length, kAccess, "smbd")), rkey_(sizeof mr_->rkey) {
  std::memcpy(rkey_.data(), &mr_->rkey, sizeof mr_->rkey);
}

VerbsServerTransport::VerbsServerTransport()
    : context_(pick_device("smbd")),
      pd_(make_pd(context_, "smbd")),
      cq_(make_cq(context_, 16, "smbd")),
      events_(make_event_channel("smbd")),
      listener_(make_id(events_.get(), this, "smbd")) {
  // Every address, any free port: the port travels in address() and clients
  // dial the host they reach the control plane on.
  sockaddr_in any{};
  any.sin_family = AF_INET;
  if (rdma_bind_addr(listener_.get(), reinterpret_cast<sockaddr*>(&any)) != 0)
    throw_errno("smbd: rdma_bind_addr", errno);
  if (rdma_listen(listener_.get(), 64) != 0) throw_errno("smbd: rdma_listen", errno);
  address_ = encode_address(ntohs(rdma_get_src_port(listener_.get())));
  spdlog::info("verbs: device {}, rdma_cm port {}", device_name(context_),
               ntohs(rdma_get_src_port(listener_.get())));
}

VerbsServerTransport::~VerbsServerTransport() {
  stop();
  // Disconnect first so clients hear of it now, not after their QP times out.
  for (auto& [id, owned] : connections_) rdma_disconnect(id);
}

std::unique_ptr<Registration> VerbsServerTransport::register_memory(void* base, std::size_t length) {
  return std::make_unique<VerbsRegistration>(pd_.get(), base, length);
}

void VerbsServerTransport::start(SegmentResolver /*resolver*/, CallHandler /*calls*/) {
  // All ops are one-sided: nothing resolves segments on the server.
  thread_.start([this](const std::stop_token& stop) { event_loop(stop); });
}

void VerbsServerTransport::stop() { thread_.stop(); }

// Sleeps on the rdma_cm event channel: the thread wakes only for connection
// set-up and tear-down.
void VerbsServerTransport::event_loop(const std::stop_token& stop) {
  while (!stop.stop_requested()) {
    pollfd fds[2] = {{events_->fd, POLLIN, 0}, {thread_.wake_fd(), POLLIN, 0}};
    ::poll(fds, 2, 500);
    for (;;) {
      rdma_cm_event* raw = nullptr;
      if (rdma_get_cm_event(events_.get(), &raw) != 0) break;  // EAGAIN: drained
      const rdma_cm_event event = *raw;
      // Ack before acting: destroying an id waits for its events' acks.
      rdma_ack_cm_event(raw);
      try {
        on_event(event);
      } catch (const std::exception& e) {
        spdlog::error("verbs: {}", e.what());
      }
    }
  }
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
      spdlog::error("verbs: RDMA device {} was removed; clients will fail", device_name(context_));
      break;
    default:
      break;
  }
}

void VerbsServerTransport::accept(rdma_cm_id* id, const rdma_conn_param& requested) {
  IdPtr owned(id);  // rejected or not, this id is ours to destroy
  if (id->verbs != context_) {
    spdlog::warn("verbs: refusing a connection on device {}: smbd registered its memory with {} "
                 "(choose with SMB_RDMA_DEVICE)", device_name(id->verbs), device_name(context_));
    rdma_reject(id, nullptr, 0);
    return;
  }
  create_qp(id, pd_.get(), cq_.get(), 1, "smbd");
  ibv_device_attr attr{};
  if (ibv_query_device(context_, &attr) != 0) throw_errno("smbd: ibv_query_device", errno);
  rdma_conn_param param{};
  // The client's READs and atomics are served by our responder resources.
  // rdma_cm reports the request from our side: its responder_resources is
  // the client's initiator depth. Zero here and the client's READs stall.
  param.responder_resources = static_cast<std::uint8_t>(
      std::min<int>(requested.responder_resources, attr.max_qp_rd_atom));
  param.initiator_depth = 0;
  param.rnr_retry_count = 7;
  if (rdma_accept(id, &param) != 0) throw_errno("smbd: rdma_accept", errno);
  connections_.emplace(id, std::move(owned));
}

}  // namespace smb::transport::verbs
