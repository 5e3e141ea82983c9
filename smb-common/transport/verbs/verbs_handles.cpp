#include "transport/verbs/verbs_handles.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

namespace smb::transport::verbs {

void throw_errno(const std::string& what, int error) {
  std::string hint;
  if (error == ENODEV || error == ENOENT)
    hint = " (no RDMA device: load a driver, or add soft-RoCE with "
           "'rdma link add rxe0 type rxe netdev IFACE')";
  else if (error == ENOMEM || error == EPERM)
    hint = " (locked-memory limit too low for RDMA: raise 'ulimit -l', e.g. unlimited, or "
           "LimitMEMLOCK= in the service)";
  else if (error == EADDRNOTAVAIL)
    hint = " (no RDMA device is bound to an interface with that address)";
  throw Error(error == ETIMEDOUT ? Errc::timeout : Errc::transport,
              what + ": " + std::strerror(error) + hint);
}

void IdDeleter::operator()(rdma_cm_id* id) const {
  if (id->qp != nullptr) rdma_destroy_qp(id);
  rdma_destroy_id(id);
}

namespace {
// Set in a child forked after this process first used rdma-core.
std::atomic<bool> forked_after_rdma{false};
}  // namespace

// rdma-core opens every device once, on first use, and keeps the contexts;
// they belong to the process that opened them, so a child forked after that
// gets EPERM from the kernel on its first post ("ibv_post_send: Permission
// denied"). Say what happened instead.
void refuse_if_forked_after_rdma(const char* who) {
  static std::once_flag registered;
  std::call_once(registered, [] { ::pthread_atfork(nullptr, nullptr, [] { forked_after_rdma = true; }); });
  if (forked_after_rdma)
    throw Error(Errc::transport, std::string(who) +
                                     ": this process was forked from one that had used RDMA already; "
                                     "rdma-core's device contexts do not survive fork(). Use native verbs "
                                     "in a process that exec'd (or forked before its parent used RDMA)");
}

EventChannelPtr make_event_channel(const char* who) {
  refuse_if_forked_after_rdma(who);
  EventChannelPtr channel(rdma_create_event_channel());
  if (!channel) throw_errno(std::string(who) + ": rdma_create_event_channel", errno);
  // Non-blocking: the server's loop and the client's progress() poll it.
  const int flags = ::fcntl(channel->fd, F_GETFL);
  ::fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK);
  return channel;
}

IdPtr make_id(rdma_event_channel* channel, void* context, const char* who) {
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(channel, &id, context, RDMA_PS_TCP) != 0)
    throw_errno(std::string(who) + ": rdma_create_id", errno);
  return IdPtr(id);
}

PdPtr make_pd(ibv_context* context, const char* who) {
  PdPtr pd(ibv_alloc_pd(context));
  if (!pd) throw_errno(std::string(who) + ": ibv_alloc_pd on " + device_name(context), errno);
  return pd;
}

CqPtr make_cq(ibv_context* context, int entries, const char* who, ibv_comp_channel* channel, void* owner) {
  CqPtr cq(ibv_create_cq(context, entries, owner, channel, 0));
  if (!cq) throw_errno(std::string(who) + ": ibv_create_cq on " + device_name(context), errno);
  return cq;
}

CompChannelPtr make_comp_channel(ibv_context* context, const char* who) {
  CompChannelPtr channel(ibv_create_comp_channel(context));
  if (!channel) throw_errno(std::string(who) + ": ibv_create_comp_channel on " + device_name(context), errno);
  const int flags = ::fcntl(channel->fd, F_GETFL);
  ::fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK);
  return channel;
}

bool post_recv(ibv_qp* qp, ibv_mr* mr, std::byte* buffer, std::size_t length, std::uint64_t wr_id) {
  ibv_sge sge{reinterpret_cast<std::uint64_t>(buffer), static_cast<std::uint32_t>(length), mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp, &wr, &bad) == 0;
}

MrPtr register_mr(ibv_pd* pd, void* base, std::size_t length, int access, const char* who) {
  MrPtr mr(ibv_reg_mr(pd, base, length, access));
  if (!mr) {
    const int error = errno;
    throw_errno(std::string(who) + ": registering " + std::to_string(length >> 20) +
                    " MiB with " + device_name(pd->context),
                error);
  }
  return mr;
}

void create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_cq* cq, std::uint32_t send_depth, std::uint32_t recv_depth,
               const char* who) {
  ibv_qp_init_attr attr{};
  attr.send_cq = cq;
  attr.recv_cq = cq;
  attr.qp_type = IBV_QPT_RC;
  attr.sq_sig_all = 0;
  attr.cap.max_send_wr = send_depth;
  attr.cap.max_recv_wr = std::max<std::uint32_t>(recv_depth, 1);
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  if (rdma_create_qp(id, pd, &attr) != 0) throw_errno(std::string(who) + ": rdma_create_qp", errno);
}

std::string device_name(ibv_context* context) {
  return context != nullptr ? ibv_get_device_name(context->device) : "?";
}

void check_port(ibv_context* context, std::uint8_t port, const char* who) {
  ibv_port_attr attr{};
  if (ibv_query_port(context, port, &attr) != 0)
    throw_errno(std::string(who) + ": querying port of " + device_name(context), errno);
  const std::string where = device_name(context) + " port " + std::to_string(port);
  if (attr.state != IBV_PORT_ACTIVE)
    throw Error(Errc::transport, std::string(who) + ": " + where + " is " +
                                     ibv_port_state_str(attr.state) +
                                     ": bring its network interface up ('ip link set IFACE up') "
                                     "and check the cable / 'rdma link'");
  ibv_gid gid{};
  const bool none = ibv_query_gid(context, port, 0, &gid) != 0 ||
                    std::all_of(std::begin(gid.raw), std::end(gid.raw), [](auto b) { return b == 0; });
  if (none)
    throw Error(Errc::transport, std::string(who) + ": " + where +
                                     " has no GID: give its network interface an IP address "
                                     "(RoCE derives GIDs from them)");
}

EventPtr next_event(rdma_event_channel* channel, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    rdma_cm_event* event = nullptr;
    if (rdma_get_cm_event(channel, &event) == 0) return EventPtr(event);
    if (errno != EAGAIN && errno != EINTR) throw_errno("rdma_get_cm_event", errno);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return nullptr;
    pollfd p{channel->fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
  }
}

}  // namespace smb::transport::verbs
