#pragma once
// A client's side of the native verbs transport: one rdma_cm connection (RC
// QP) per server, one-sided RDMA READ/WRITE and atomics on it.
//
// Callers hand us arbitrary memory, which the NIC can only touch once
// registered; rather than register (and pin) every caller buffer, each
// channel owns a registered staging area cut into slots, one per send-queue
// entry. A write copies into a slot before posting; a read or atomic lands in
// a slot and is copied out on completion, so an abandoned op can never write
// into the caller's memory late. Memory the caller registered
// (Client::register_memory) is the exception: the NIC reads and writes it in
// place, zero-copy. Ops wait in a backlog while every slot (and so every
// send-queue entry) is busy: the send queue is bounded by design.
//
// Calls go out as SENDs from a slot; their replies land in receives posted
// at connect (call_wire.hpp), at most kCallCredits calls unanswered.
#include "transport/channel_health.hpp"
#include "transport/pending_table.hpp"
#include "transport/transport.hpp"
#include "transport/verbs/verbs_handles.hpp"

#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

namespace smb::transport::verbs {

class VerbsChannel;

class VerbsClientTransport final : public ClientTransport {
 public:
  VerbsClientTransport();
  ~VerbsClientTransport() override;

  std::string name() const override { return "verbs"; }
  const Bytes& address() const override { return address_; }
  std::unique_ptr<Channel> connect(const Bytes& server_address, const std::string& peer,
                                   std::span<const std::uint8_t> ticket) override;
  void progress() override;
  void abandon(const Completion& completion) override;
  // Registers the region with every channel's protection domain, now and
  // for channels opened later.
  std::optional<std::uint64_t> register_memory(void* base, std::size_t length) override;
  void unregister_memory(std::uint64_t handle) override;

 private:
  friend class VerbsChannel;
  struct Region {
    std::byte* base;
    std::size_t length;
  };
  std::mutex mutex_;  // guards the channel list, the regions and every channel's queues
  std::vector<VerbsChannel*> channels_;
  std::map<std::uint64_t, Region> regions_;  // by handle
  std::uint64_t next_region_ = 1;
  Bytes address_;  // clients need no address of their own: they dial out
};

class VerbsRemoteSegment final : public RemoteSegment {
 public:
  VerbsRemoteSegment(SegmentDescriptor descriptor, std::uint32_t rkey)
      : descriptor_(std::move(descriptor)), rkey_(rkey) {}
  const SegmentDescriptor& descriptor() const override { return descriptor_; }
  std::uint32_t rkey() const { return rkey_; }

 private:
  SegmentDescriptor descriptor_;
  std::uint32_t rkey_;
};

class VerbsChannel final : public Channel {
 public:
  // `ticket`: the session's (ChannelAdmission), sent with the connect request.
  VerbsChannel(VerbsClientTransport& transport, std::uint16_t port, std::string peer,
               std::span<const std::uint8_t> ticket);
  ~VerbsChannel() override;

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
  friend class VerbsClientTransport;
  void atomic(ibv_wr_opcode opcode, const char* what, RemoteSegment& seg, std::uint64_t offset,
              std::uint64_t operand, std::uint64_t compare, std::uint64_t* old_value,
              const CompletionPtr& completion);

  // One work request's worth of an op (ops larger than a slot are split).
  struct Piece {
    CompletionPtr completion;
    ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE;
    std::uint64_t remote = 0;
    std::uint32_t rkey = 0;
    const std::byte* src = nullptr;  // writes
    std::byte* dst = nullptr;        // reads: length bytes; atomics: 8 bytes
    std::uint32_t length = 0;
    std::uint64_t operand = 0;  // fetch-add: the addend; compare-swap: the new value
    std::uint64_t compare = 0;
    Bytes message{};  // calls (IBV_WR_SEND): header and frame; the payload is src/length
    std::uint32_t lkey = 0;  // nonzero: src/dst is registered caller memory, used in place
  };
  // Caller memory registered with this channel's protection domain.
  struct LocalRegion {
    std::uint64_t handle;
    std::size_t length;
    MrPtr mr;
  };
  // A call sent (or queued), until its reply arrives.
  struct PendingCall {
    CompletionPtr completion;
    Bytes* reply = nullptr;
  };

  // All under transport_.mutex_.
  void enqueue(Piece piece);
  void add_region(std::uint64_t handle, std::byte* base, std::size_t length);
  void remove_region(std::uint64_t handle);
  // The lkey of a registered region holding [p, p + length), or 0.
  std::uint32_t registered(const void* p, std::size_t length) const;
  void split(Piece piece, std::size_t length);
  void pump();
  int poll_completions();
  void complete(std::uint32_t slot);
  void on_reply(std::uint32_t slot, std::size_t length);
  void poll_cm_events();
  void fail(Errc code, const std::string& message);
  void drop(const Completion& completion);

  VerbsClientTransport& transport_;
  std::string peer_;
  // Destroyed bottom-up: the id (and its QP) before the MR, CQ and PD it uses.
  EventChannelPtr events_;
  PdPtr pd_;
  CqPtr cq_;
  std::vector<std::byte> staging_;
  MrPtr staging_mr_;
  std::map<const std::byte*, LocalRegion> local_;  // by base address
  std::vector<std::byte> replies_;  // kCallCredits receives of kReplyMessage
  MrPtr replies_mr_;
  IdPtr id_;
  std::vector<std::optional<Piece>> in_flight_;  // by slot (= wr_id)
  std::vector<std::uint32_t> free_slots_;
  std::deque<Piece> backlog_;
  std::deque<std::uint32_t> posted_;  // slots in flight, in posting order
  std::uint32_t unsignalled_ = 0;     // WRs posted since the last signalled one
  PendingTable<PendingCall> calls_;
  std::uint32_t credits_used_ = 0;  // calls sent whose reply has not come (abandoned ones too)
  std::chrono::steady_clock::time_point last_completion_ = std::chrono::steady_clock::now();  // for stall_report
  std::string device_;
  std::string route_;  // "rxe0 port 1, GID 1 (RoCE v2, 10.0.2.15)": what rdma_cm chose
  ChannelHealth health_;
};

}  // namespace smb::transport::verbs
