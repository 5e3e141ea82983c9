#pragma once
// RAII owners of rdma-core objects (libibverbs, librdmacm), the transport
// address both sides exchange, and errors that name the fix for the set-up
// problems RDMA users hit most.
#include <smb/error.hpp>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace smb::transport::verbs {

// What the server puts in its transport address: the rdma_cm port it
// listens on (every address), and one address per rail: each active RDMA
// port it registered its memory with, in the order of the rkeys in each
// segment's key. A client connects its first rail to the host it reaches
// the control plane on, and one more to each other rail it can reach
// (issue 37 item 3). Wire form: "SMBV", the port, then a count and, per
// rail, a family byte (4 or 6) and 16 address bytes; a server of one rail
// sends the first 6 bytes alone.
// The most ports a server stripes over (and so rkeys in a segment's key).
inline constexpr std::size_t kMaxRails = 8;
struct ServerAddress {
  std::uint16_t port = 0;
  std::vector<sockaddr_storage> rails;  // their ports are 0
};
std::vector<std::uint8_t> encode_address(const ServerAddress& address);
ServerAddress decode_address(const std::vector<std::uint8_t>& bytes, const std::string& peer);

// The server's rdma_accept private data: which of its rails accepted.
struct AcceptData {
  char magic[4] = {'S', 'M', 'B', 'R'};
  std::uint8_t rail = 0;
};

// errno-style failure of a verbs/rdma_cm call, with a hint for the usual causes.
[[noreturn]] void throw_errno(const std::string& what, int error);

struct EventChannelDeleter { void operator()(rdma_event_channel* c) const { rdma_destroy_event_channel(c); } };
struct IdDeleter { void operator()(rdma_cm_id* id) const; };  // destroys its QP first
struct PdDeleter { void operator()(ibv_pd* pd) const { ibv_dealloc_pd(pd); } };
struct CqDeleter { void operator()(ibv_cq* cq) const { ibv_destroy_cq(cq); } };
struct MrDeleter { void operator()(ibv_mr* mr) const { ibv_dereg_mr(mr); } };
struct CompChannelDeleter { void operator()(ibv_comp_channel* c) const { ibv_destroy_comp_channel(c); } };
struct DevicesDeleter { void operator()(ibv_context** list) const { rdma_free_devices(list); } };

using EventChannelPtr = std::unique_ptr<rdma_event_channel, EventChannelDeleter>;
using IdPtr = std::unique_ptr<rdma_cm_id, IdDeleter>;
using PdPtr = std::unique_ptr<ibv_pd, PdDeleter>;
using CqPtr = std::unique_ptr<ibv_cq, CqDeleter>;
using MrPtr = std::unique_ptr<ibv_mr, MrDeleter>;
using CompChannelPtr = std::unique_ptr<ibv_comp_channel, CompChannelDeleter>;

// A non-blocking event channel (so a progress loop can poll it) and an id on it.
EventChannelPtr make_event_channel(const char* who);
IdPtr make_id(rdma_event_channel* channel, void* context, const char* who);
PdPtr make_pd(ibv_context* context, const char* who);
// A CQ; with `channel`, it reports completions there (armed by the caller), with `owner` as its context.
CqPtr make_cq(ibv_context* context, int entries, const char* who, ibv_comp_channel* channel = nullptr,
              void* owner = nullptr);
// A completion channel whose fd a loop can poll (non-blocking).
CompChannelPtr make_comp_channel(ibv_context* context, const char* who);
// ibv_reg_mr; ENOMEM/EPERM is nearly always the locked-memory limit.
MrPtr register_mr(ibv_pd* pd, void* base, std::size_t length, int access, const char* who);
// An RC QP on `id` with `send_depth` send and `recv_depth` receive WRs; both queues report to `cq`.
void create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_cq* cq, std::uint32_t send_depth, std::uint32_t recv_depth,
               const char* who);
// Posts one receive of `length` bytes at `buffer` (in `mr`); false if the QP refused it.
bool post_recv(ibv_qp* qp, ibv_mr* mr, std::byte* buffer, std::size_t length, std::uint64_t wr_id);

// SMB_RDMA_DEVICE's names ("rxe_a" or "mlx5_0,mlx5_1"); empty: unset.
std::vector<std::string> wanted_devices();
bool device_wanted(const std::string& name);
// The device rdma_cm would use: SMB_RDMA_DEVICE's first or the first one.
// Throws (naming the fix) if there is none, a name in SMB_RDMA_DEVICE is
// no device, the port is down, or it has no GID.
// Contexts belong to librdmacm and live as long as the process.
ibv_context* pick_device(const char* who);
// A local RDMA port with an IP address: one rail of a server.
struct LocalPort {
  ibv_context* context = nullptr;
  std::uint8_t port = 1;
  sockaddr_storage address{};  // the first of its interface's addresses
};
// Every active port of the devices SMB_RDMA_DEVICE allows (all, unset)
// that an interface address binds to, by device name and port: rdma_cm's
// own answer to which port an address belongs to (RoCE and IPoIB alike).
std::vector<LocalPort> local_ports(const char* who);
// "10.0.3.1"
std::string address_text(const sockaddr* address);
// Throws if port `port` of `context` is not active, or has no GID.
void check_port(ibv_context* context, std::uint8_t port, const char* who);
std::string device_name(ibv_context* context);
// What rdma_cm chose for a resolved route: "rxe0 port 1, GID 1 (RoCE v2,
// 10.0.2.15)" (verbs_host_checks.cpp, beside the GID table's other readers).
std::string route_choice(rdma_cm_id* id);
// SMB_RDMA_GID_INDEX (unset: nullopt): the address GID N of SMB_RDMA_DEVICE
// (else the first device), port 1, was made from, as the source for
// rdma_resolve_addr, so that rdma_cm routes from that GID. Throws naming
// the variable where the index is not a RoCE GID there.
std::optional<sockaddr_storage> chosen_source(const char* who);
// The source rdma_cm routes from to reach `peer` (issue 37 item 2):
// SMB_RDMA_GID_INDEX's GID; else SMB_RDMA_DEVICE's RoCE v2 address of the
// peer's family, on the peer's subnet where it has one; else, where several
// devices have an address on the peer's subnet, the one nearest this
// thread's NUMA node (host/numa.hpp); else nullopt: rdma_cm's own route.
// `why` says which rule chose (empty: none did).
std::optional<sockaddr_storage> choose_source(const sockaddr* peer, std::string& why, const char* who);

// The local address to connect a further rail to `rail` (another port of
// a server) from: an address on the rail's subnet, of an interface other
// than those in `used` where there is one; nullopt where this host has
// no address on that subnet (the rail is not connected).
std::optional<sockaddr_storage> rail_source(const sockaddr* rail, const std::vector<sockaddr_storage>& used);

// Waits for the next event on `channel` (non-blocking fd); nullptr on timeout.
// The caller acks it (EventPtr does).
struct EventDeleter { void operator()(rdma_cm_event* e) const { rdma_ack_cm_event(e); } };
using EventPtr = std::unique_ptr<rdma_cm_event, EventDeleter>;
EventPtr next_event(rdma_event_channel* channel, std::chrono::milliseconds timeout);

}  // namespace smb::transport::verbs
