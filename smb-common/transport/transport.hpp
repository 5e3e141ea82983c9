#pragma once
// The transport abstractions. Each transport (UCX in ucx/, native rdma-core verbs in verbs/)
// implements the same four pieces, so the server and the client never see
// which one they run on:
//
//   ServerTransport  the daemon's side: registers the pool and its segments,
//                    runs the progress loop, and serves server-assisted ops
//                    against a SegmentResolver.
//   Registration     registered memory and the packed remote key a client
//                    needs to reach it (per segment, or the pool's: see
//                    register_pool).
//   ClientTransport  a client's side: owns the local progress engine and
//                    opens one Channel per server.
//   Channel          the data path to one server: put/get/atomics on a
//                    RemoteSegment, and calls (two-sided requests the
//                    server acts on), each reporting to a Completion.
//                    What it can do is data (ChannelCaps), not a question
//                    of which transport it is.
//
// Transports are listed, with their factories, in registry.hpp.
#include "transport/channel_admission.hpp"
#include "transport/completion.hpp"

#include <smb/error.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace smb::transport {

using Bytes = std::vector<std::uint8_t>;

// Settings only one transport understands (e.g. UCX's data protocol), as
// "key" -> "value"; each transport rejects keys it does not know.
using TransportOptions = std::map<std::string, std::string>;

// What one channel can do, as plain data (cf. NCCL's ncclNetProperties_t):
// callers adapt to it instead of asking which transport they run on.
struct ChannelCaps {
  // Atomics are done by the NIC or shared memory, not by the server's CPU.
  bool native_atomics = false;
  // The channel notices a dead server by itself. When false (UCX's
  // shared-memory lanes), the client watches the control connection instead.
  bool detects_peer_failure = true;
  // Puts and gets from memory the caller registered (register_memory) skip
  // the transport's staging; without it they are copied.
  bool registration_helps = false;
  // The largest payload one call carries; callers split larger ones.
  std::size_t max_call_payload = 0;
  // The server is on this host and its memory is reached through shared
  // memory (UCX's CMA or mapped lanes): moving bytes between two such
  // servers through this process is a memory copy, with no network to save.
  bool same_host_memory = false;
};

class Registration {
 public:
  virtual ~Registration() = default;
  virtual const Bytes& remote_key() const = 0;
};

// What the server tells a client about one segment.
struct SegmentDescriptor {
  std::uint64_t id = 0;       // server-local segment id
  std::uint64_t address = 0;  // remote virtual address of the segment's first byte
  std::uint64_t length = 0;
  Bytes remote_key;
};

// Server side: the memory behind a segment id, kept alive by `owner` while a
// server-assisted op uses it.
struct SegmentAccess {
  std::shared_ptr<const void> owner;
  std::byte* base = nullptr;
  std::uint64_t length = 0;
};
// `scope`: the prefix every segment name a channel reaches starts with (its
// session's credential, protocol/credential.hpp; empty: any segment).
using SegmentResolver = std::function<std::optional<SegmentAccess>(std::uint64_t id, std::string_view scope)>;

// Calls: two-sided requests over the data path (UCX active messages, verbs
// SEND/RECV) for what the server must do on request: vector ops, version
// reads and waits. A call is a control-protocol frame (protocol/messages.hpp)
// plus a raw payload (a vector op's x), so data never goes through
// MessagePack or the control connection's TCP stream; the reply is a frame.
//
// The handler runs on the transport's thread and must not block; it answers
// each call exactly once through `respond`, from any thread.
using Respond = std::function<void(Bytes reply_frame)>;
// `scope`: the calling channel's, as for SegmentResolver.
using CallHandler = std::function<void(Bytes frame, Bytes payload, std::string_view scope, Respond respond)>;

// How the server's progress thread waits for work (smbd --poll).
struct ServerTuning {
  // Busy-poll: never sleep between events. Lower latency for small ops at
  // the price of a core; the default sleeps when idle (no CPU between ops).
  bool busy_poll = false;
  // Otherwise: after work, keep looking this long before sleeping (0: sleep
  // at once). A chain of small calls then finds the thread awake; an idle
  // server costs nothing (idle_spin.hpp).
  std::chrono::microseconds spin{50};
};

// What a server's transport moved for clients through the server's own
// CPU: server-assisted reads, writes and atomics (UCX active messages).
// One-sided RMA never reaches the server's CPU and is not in here. Running
// totals, read by smbd's metrics (any thread).
struct ServerTraffic {
  std::atomic<std::uint64_t> bytes_written{0};
  std::atomic<std::uint64_t> bytes_read{0};
  std::atomic<std::uint64_t> atomics{0};
};

class ServerTransport {
 public:
  virtual ~ServerTransport() = default;
  virtual std::string name() const = 0;
  // Connection information clients need (e.g. a UCX worker address).
  virtual const Bytes& address() const = 0;
  // Called once, with the daemon's whole pool, before any register_memory.
  // A transport whose keys need an OS object per registration (UCX's
  // shared memory: a SysV segment or a file descriptor each) registers the
  // pool here, once, and may replace its pages with zeroed memory it can
  // share; it returns that registration (the caller keeps it alive until
  // every segment is gone). Others return null and register per segment.
  virtual std::unique_ptr<Registration> register_pool(void* base, std::size_t length) = 0;
  // Registers a page-aligned range of the pool for one segment; the remote
  // key reaches at least that range (the whole pool where the pool was
  // registered once).
  virtual std::unique_ptr<Registration> register_memory(void* base, std::size_t length) = 0;
  // Starts the progress thread; server-assisted ops resolve segments through
  // `resolver`, and calls go to `calls`. Where `admission` is required, a
  // channel that presented no ticket it admits gets nothing served:
  // its calls and server-assisted ops are refused with permission_denied
  // (or its connection is), and a channel whose session closed is dropped.
  virtual void start(SegmentResolver resolver, CallHandler calls, const ServerTuning& tuning,
                     ChannelAdmission admission) = 0;
  virtual void stop() = 0;
  // What it moved through the server's CPU; null for a transport whose
  // clients only use one-sided ops.
  virtual const ServerTraffic* traffic() const { return nullptr; }
};

// A segment attached on the client side (an unpacked remote key).
class RemoteSegment {
 public:
  virtual ~RemoteSegment() = default;
  virtual const SegmentDescriptor& descriptor() const = 0;
  // The local address of the segment's byte `offset` where [offset, offset
  // + length) is mapped into this process (UCX's shared-memory lanes on the
  // server's host); null where the transport moves the bytes.
  virtual std::byte* mapped(std::uint64_t /*offset*/, std::size_t /*length*/) const { return nullptr; }
};

class Channel {
 public:
  virtual ~Channel() = default;
  // e.g. "ucx rma via cma/memory" — shown to users so they know the path taken.
  virtual std::string describe() const = 0;
  virtual std::unique_ptr<RemoteSegment> attach(const SegmentDescriptor& segment) = 0;

  // Each op calls completion->finish() exactly once. The caller has called
  // completion->expect() and keeps the memory valid until then. Offsets are
  // relative to the segment and already bounds-checked by the caller.
  // put completes when the data is visible to others at the server.
  virtual void put(RemoteSegment& seg, std::uint64_t offset, const void* src, std::size_t length,
                   const CompletionPtr& completion) = 0;
  virtual void get(RemoteSegment& seg, std::uint64_t offset, void* dst, std::size_t length,
                   const CompletionPtr& completion) = 0;
  virtual void fetch_add(RemoteSegment& seg, std::uint64_t offset, std::uint64_t value,
                         std::uint64_t* old_value, const CompletionPtr& completion) = 0;
  virtual void compare_swap(RemoteSegment& seg, std::uint64_t offset, std::uint64_t expected,
                            std::uint64_t desired, std::uint64_t* old_value,
                            const CompletionPtr& completion) = 0;

  // Sends a call (see CallHandler); the server's reply frame lands in *reply.
  // `frame`, `payload` and `reply` stay valid until the completion finishes;
  // the payload is at most caps().max_call_payload bytes.
  virtual void call(std::span<const std::uint8_t> frame, std::span<const std::byte> payload, Bytes* reply,
                    const CompletionPtr& completion) = 0;
  virtual ChannelCaps caps() const = 0;

  // The server is known dead (its control connection closed): fail what is
  // in flight and refuse new ops.
  virtual void peer_lost(const std::string& reason) = 0;
  // Why the channel failed, if it did.
  virtual std::optional<std::string> failure() const = 0;
  // What this channel's ops are waiting on now, for the message of an op
  // that timed out: the connection's state as the transport sees it (verbs:
  // the QP's state and work requests in flight; tcp: each socket's TCP
  // state, unsent and unacknowledged bytes, retransmissions; ucx: requests
  // the server has not answered). Safe from any thread.
  virtual std::string stall_report() const = 0;
};

class ClientTransport {
 public:
  virtual ~ClientTransport() = default;
  virtual std::string name() const = 0;
  virtual const Bytes& address() const = 0;
  // `peer` names the server in messages ("127.0.0.1:7000"); `ticket` is
  // what the server's hello reply gave this client's authenticated session
  // (empty for a server that admits every channel): the channel presents it
  // (ChannelAdmission), and connect fails with permission_denied where the
  // server does not admit it.
  virtual std::unique_ptr<Channel> connect(const Bytes& server_address, const std::string& peer,
                                           std::span<const std::uint8_t> ticket) = 0;
  // Drives every channel's outstanding ops; safe from any thread.
  virtual void progress() = 0;
  // Forgets the ops of a completion that timed out, so that a late reply can
  // no longer write into the caller's memory.
  virtual void abandon(const Completion& completion) = 0;
  // Registers caller memory for zero-copy ops: puts and gets whose memory
  // lies inside it skip the transport's own staging. Returns a handle for
  // unregister_memory, or nullopt where the transport has nothing to do
  // (UCX keeps its own registration cache). Throws smb::Error (e.g. the
  // memlock limit).
  virtual std::optional<std::uint64_t> register_memory(void* base, std::size_t length) = 0;
  virtual void unregister_memory(std::uint64_t handle) = 0;
};

}  // namespace smb::transport
