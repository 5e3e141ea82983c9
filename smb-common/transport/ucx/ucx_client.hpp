#pragma once
// A client's side of the UCX transport: one worker per client, one endpoint
// (Channel) per server, and the choice between one-sided RMA and the
// server-assisted "am" protocol for each server.
#include "transport/channel_health.hpp"
#include "transport/pending_table.hpp"
#include "transport/transport.hpp"
#include "transport/reply_queue.hpp"
#include "transport/ucx/am_wire.hpp"
#include "transport/ucx/ucx_handles.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>

namespace smb::transport::ucx {

class UcxChannel;
struct OpContext;

// How bytes move between a client and one server (option "protocol", else
// SMB_DATA_PROTOCOL):
//  rma: one-sided put/get/atomics (shared memory via CMA, InfiniBand/RoCE).
//  am:  active messages that the server copies into its memory; faster where
//       UCX only emulates RMA in software (TCP).
//  automatic: rma when UCX's RMA lanes to that server are not emulated, else am.
enum class DataProtocol { automatic, rma, am };
DataProtocol data_protocol(const TransportOptions& options);

class UcxClientTransport final : public ClientTransport {
 public:
  explicit UcxClientTransport(DataProtocol protocol = DataProtocol::automatic);
  ~UcxClientTransport() override;

  std::string name() const override { return "ucx"; }
  const Bytes& address() const override { return address_; }
  std::unique_ptr<Channel> connect(const Bytes& server_address, const std::string& peer,
                                   std::span<const std::uint8_t> ticket) override;
  void progress() override;
  void abandon(const Completion& completion) override;
  // UCX registers (and caches) caller memory itself.
  std::optional<std::uint64_t> register_memory(void* /*base*/, std::size_t /*length*/) override {
    return std::nullopt;
  }
  void unregister_memory(std::uint64_t /*handle*/) override {}

 private:
  friend class UcxChannel;

  // An "am" op waiting for the server's reply.
  struct PendingAm {
    CompletionPtr completion;
    UcxChannel* channel = nullptr;
    void* destination = nullptr;  // reads: where the data goes
    std::uint64_t length = 0;
    const char* op = "";
    Bytes* frame = nullptr;  // calls: the reply frame goes here, whatever its length
  };

  static constexpr std::size_t kSpareOps = 64;
  std::unique_ptr<OpContext> op_context(CompletionPtr completion, std::uint64_t operand,
                                        const std::shared_ptr<const std::string>& peer, const char* op);

 public:
  static void finish_op(void* user_data, ucs_status_t status);  // a UCX callback's user data

 private:
  static ucs_status_t on_reply(void* arg, const void* header, std::size_t header_length, void* data,
                               std::size_t length, const ucp_am_recv_param_t* param);
  void fail_pending(UcxChannel* channel, Errc code, const std::string& message);
  bool block_for_event(std::chrono::microseconds limit, std::uint64_t seen);  // client_idle.hpp

  // Send-side state of an "am" request: UCX reads the header until the send
  // completes. Owned here (not by the callback) so that sends still in flight
  // when the transport goes are freed too.
  struct SendContext {
    std::array<std::byte, std::max({sizeof(AmRequestHeader), sizeof(AmAtomicHeader), sizeof(CallHeader),
                                    sizeof(AmPingHeader)})>
        header{};
    std::array<ucp_dt_iov_t, 2> iov{};  // calls: frame and payload, read until the send completes
    std::vector<std::byte> long_header;  // rendezvous calls: CallHeader and the frame (am_wire.hpp)
    std::uint64_t token = 0;
    UcxClientTransport* transport = nullptr;
  };

  // Declared before the worker, so that callbacks UCX runs while the worker
  // is destroyed still find them.
  std::mutex mutex_;  // guards the worker and everything below
  PendingTable<PendingAm> pending_;
  std::unordered_map<std::uint64_t, std::unique_ptr<SendContext>> sends_;  // by token
  // Requests sent and not yet answered (calls; reads, writes and atomics
  // through the server), by token: each holds one of its channel's credits
  // until a reply with its token comes, even after the caller abandoned it
  // (the server still answers it).
  std::unordered_map<std::uint64_t, UcxChannel*> credited_;
  void return_credit(std::uint64_t token);  // its reply (and data) came: the channel may send the next
  struct ReadContext;
  static void read_received(void* request, ucs_status_t status, std::size_t length, void* user_data);
  std::vector<std::unique_ptr<OpContext>> spare_ops_;  // finished op contexts, for reuse
  DataProtocol protocol_;
  // Waits that block (block_for_event): the worker's event fd (owned by the
  // worker), and under mutex_ who sleeps on it and on `idle_`.
  int event_fd_ = -1;
  std::uint64_t generation_ = 0;  // progress rounds that found events, and fd wake-ups
  bool fd_sleeper_ = false;
  int idle_sleepers_ = 0;
  std::condition_variable idle_;
  ContextPtr context_;
  WorkerPtr worker_;
  Bytes address_;
};

// Segments whose keys are equal share one unpacked key: smbd's UCX pool
// has one key for all its segments, and unpacking a shared-memory key maps
// the server's pool into this process.
//
// Over shared memory the key's mapping is this process's view of the
// segment (ucp_rkey_ptr), and ops go there directly: reads and writes are a
// memcpy, atomics the CPU's own locked instructions (what UCX's posix and
// sysv lanes do, without a UCX call and the transport's lock held around
// it: an 8-byte read in smb-bench 0.22 us instead of 0.28-0.33, and other
// threads' progress does not wait for it). A segment larger than
// the last-level cache is written with streaming stores
// (util/stream_copy.hpp), which UCX's memcpy does not use for ops of a few MiB.
class UcxRemoteSegment final : public RemoteSegment {
 public:
  UcxRemoteSegment(SegmentDescriptor descriptor, std::shared_ptr<const RkeyPtr> rkey, std::byte* mapped,
                   bool streamed)
      : descriptor_(std::move(descriptor)), rkey_(std::move(rkey)), mapped_(mapped), streamed_(streamed) {}
  const SegmentDescriptor& descriptor() const override { return descriptor_; }
  ucp_rkey_h rkey() const { return rkey_->get(); }
  std::byte* mapped(std::uint64_t offset, std::size_t length) const override {
    return mapped_ != nullptr && offset <= descriptor_.length && length <= descriptor_.length - offset
               ? mapped_ + offset
               : nullptr;
  }
  // Whether writes to the mapping use streaming stores.
  bool streamed() const { return streamed_; }

 private:
  SegmentDescriptor descriptor_;
  std::shared_ptr<const RkeyPtr> rkey_;
  std::byte* mapped_;
  bool streamed_;
};

class UcxChannel final : public Channel {
 public:
  UcxChannel(UcxClientTransport& transport, const Bytes& server_address, std::string peer,
             DataProtocol protocol, std::span<const std::uint8_t> ticket);
  ~UcxChannel() override;

  std::string describe() const override;
  std::unique_ptr<RemoteSegment> attach(const SegmentDescriptor& segment) override;
  void put(RemoteSegment& seg, std::uint64_t offset, const void* src, std::size_t length,
           const CompletionPtr& completion) override;
  void get(RemoteSegment& seg, std::uint64_t offset, void* dst, std::size_t length,
           const CompletionPtr& completion) override;
  void fetch_add(RemoteSegment& seg, std::uint64_t offset, std::uint64_t value,
                 std::uint64_t* old_value, const CompletionPtr& completion) override;
  void compare_swap(RemoteSegment& seg, std::uint64_t offset, std::uint64_t expected,
                    std::uint64_t desired, std::uint64_t* old_value,
                    const CompletionPtr& completion) override;
  void call(std::span<const std::uint8_t> frame, std::span<const std::byte> payload, Bytes* reply,
            const CompletionPtr& completion) override;
  ChannelCaps caps() const override;
  void peer_lost(const std::string& reason) override;
  std::optional<std::string> failure() const override;
  std::string stall_report() const override;

 private:
  friend class UcxClientTransport;
  static void on_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  void fail(std::string reason);  // under the lock
  bool admit_unlocked(const CompletionPtr& completion, const char* op);  // takes the lock
  void send_am(unsigned id, RemoteSegment& seg, std::uint64_t offset, const void* src,
               void* dst, std::size_t length, const CompletionPtr& completion, const char* op);
  // `second`, if not empty, follows `payload` in the message. The header
  // starts with the token (from pending_) that the reply echoes.
  void send_request(unsigned id, const void* header, std::size_t header_length, const void* payload,
                    std::size_t payload_length, std::uint64_t token, const CompletionPtr& completion,
                    const char* op, std::span<const std::byte> second = {},
                    std::uint32_t protocol = UCP_AM_SEND_FLAG_EAGER);
  void atomic(AtomicOp op, RemoteSegment& seg, std::uint64_t offset, std::uint64_t operand,
              std::uint64_t compare, std::uint64_t* result, const CompletionPtr& completion);

  UcxClientTransport& transport_;
  std::string peer_;
  std::shared_ptr<const std::string> peer_name_;  // peer_, for error texts built after the op
  // One endpoint per server; everything (RMA, atomics, calls) takes its
  // fastest lanes. On one host those are shared memory, whose endpoint UCX
  // 1.13 gives no peer-failure detection: the control connection tells
  // instead (ServerLink::check_alive).
  ucp_ep_h ep_ = nullptr;
  // A ping that wires up the server's way back (shared memory) and
  // presents the session's ticket (ChannelAdmission); throws where the
  // server does not answer or refuses the ticket.
  void wire_up_replies(std::span<const std::uint8_t> ticket, std::unique_lock<std::mutex>& lock);

  // Credits (reply_queue.hpp): at most kCallCredits requests that the
  // server answers (calls, and reads, writes and atomics through the server
  // over "am") unanswered per server, as the server expects of an honest
  // client; more wait here. The server drops replies past its bound: over
  // shared memory because they have nowhere to go until this client
  // progresses, over a slow link because a 100 MB read was hundreds of 1 MiB
  // replies at once.
  struct QueuedRequest {
    unsigned id;
    std::array<std::byte, sizeof(UcxClientTransport::SendContext::header)> header;
    std::size_t header_length;
    const void* payload;
    std::size_t payload_length;
    std::span<const std::byte> second;
    std::uint64_t token;
    CompletionPtr completion;
    const char* op;
    std::uint32_t protocol = UCP_AM_SEND_FLAG_EAGER;  // or _RNDV (am_wire.hpp)
  };
  std::deque<QueuedRequest> queued_;
  std::uint32_t in_flight_ = 0;
  void send_credited(QueuedRequest request);     // now, or queued until a credit comes back
  void send_queued(const QueuedRequest& request);  // with a credit free
  void credit_returned();
  bool use_am_ = false;                 // data through the server ("am") rather than RMA
  bool bulk_rendezvous_ = false;        // "am" over TCP: bulk data by rendezvous (am_wire.hpp)
  bool am_atomics_ = false;             // atomics through the server (no native atomic lane)
  bool peer_failure_detected_ = true;   // UCX reports the server's death on this endpoint
  bool shared_memory_rma_ = false;      // RMA over shared-memory lanes: a put done at once is visible
  std::string lanes_;
  std::map<Bytes, std::weak_ptr<const RkeyPtr>> rkeys_;  // packed key -> unpacked, while in use
  ChannelHealth health_;
};

}  // namespace smb::transport::ucx
