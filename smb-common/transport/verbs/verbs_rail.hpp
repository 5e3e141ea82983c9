#pragma once
// One rail of a client's channel to a server (issue 37 item 3): an RC QP
// from one local RDMA port to one of the server's ports, with its own
// protection domain, completion queue, registered staging slots and call
// receives. A VerbsChannel stripes one server's ops over its rails
// (verbs_client.hpp); a rail only posts and completes the pieces it is
// given, and when it fails it hands back what may safely go elsewhere.
//
// Callers hand us arbitrary memory, which the NIC can only touch once
// registered; rather than register (and pin) every caller buffer, a rail
// owns a registered staging area cut into slots, one per send-queue entry.
// A write copies into a slot before posting; a read or atomic lands in a
// slot and is copied out on completion, so an abandoned op can never write
// into the caller's memory late. Memory the caller registered
// (Client::register_memory) is the exception: the NIC reads and writes it
// in place, zero-copy. Pieces wait in a backlog while every slot (and so
// every send-queue entry) is busy: the send queue is bounded by design.
//
// Calls go out as SENDs from a slot; their replies land in receives posted
// at connect (call_wire.hpp), at most kCallCredits calls unanswered.
#include "transport/pending_table.hpp"
#include "transport/transport.hpp"
#include "transport/verbs/verbs_handles.hpp"

#include <array>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace smb::transport::verbs {

// Send-queue depth (= staging slots) and slot size: 64 x 128 KiB = 8 MiB of
// registered memory per rail, enough to keep soft-RoCE and real NICs busy.
inline constexpr std::uint32_t kDepth = 64;
inline constexpr std::size_t kSlot = 128 * 1024;
// A segment's rkeys, by the server's rail.
using RailKeys = std::array<std::uint32_t, kMaxRails>;

// One work request's worth of an op (ops larger than a slot are split).
struct Piece {
  CompletionPtr completion;
  ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE;
  std::uint64_t remote = 0;
  RailKeys rkeys{};  // the segment's, by the server's rail: the rail that posts it picks its own
  const std::byte* src = nullptr;  // writes; calls: the payload
  std::byte* dst = nullptr;        // reads: length bytes; atomics: 8 bytes
  std::uint32_t length = 0;
  std::uint64_t operand = 0;  // fetch-add: the addend; compare-swap: the new value
  std::uint64_t compare = 0;
  Bytes frame{};           // calls (IBV_WR_SEND): the frame; a CallHeader goes before it when posted
  Bytes* reply = nullptr;  // calls: where the reply frame lands
  std::uint32_t lkey = 0;  // set when posted: nonzero, src/dst is registered caller memory, used in place
  bool atomic() const { return opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || opcode == IBV_WR_ATOMIC_CMP_AND_SWP; }
  // Harmless to post again elsewhere after its rail failed with it in
  // flight: a read, or a write of the same bytes. An atomic or a call may
  // have been applied already.
  bool repeatable() const { return opcode == IBV_WR_RDMA_WRITE || opcode == IBV_WR_RDMA_READ; }
};

// Why a rail stopped.
struct RailFailure {
  Errc code = Errc::transport;
  std::string message;
};

class Rail {
 public:
  using Clock = std::chrono::steady_clock;
  // Connects an RC QP to `server` (an address with the server's rdma_cm
  // port) from `source` (nullopt: rdma_cm's route), all three rdma_cm
  // stages within `deadline`; `chose_by` names the rule that chose the
  // source, for the path line. Throws naming the stage that failed.
  Rail(const sockaddr* server, const std::optional<sockaddr_storage>& source, const std::string& chose_by,
       const std::string& peer, std::span<const std::uint8_t> ticket, Clock::time_point deadline);
  ~Rail();
  Rail(const Rail&) = delete;
  Rail& operator=(const Rail&) = delete;

  // Which of the server's ports this rail reaches: the index of the rkey
  // to use in each segment's key list (the server says so when it accepts).
  std::uint8_t server_rail() const { return server_rail_; }
  ibv_context* context() const { return id_->verbs; }
  std::uint8_t port() const { return id_->port_num; }
  std::uint32_t qp_num() const { return id_->qp->qp_num; }
  const std::string& route() const { return route_; }
  const std::string& device() const { return device_; }
  // The local address rdma_cm bound it to.
  sockaddr_storage local_address() const;

  bool failed() const { return failure_.has_value(); }
  const std::optional<RailFailure>& failure() const { return failure_; }
  // Pieces queued or in flight.
  std::size_t load() const { return backlog_.size() + (kDepth - free_slots_.size()); }
  // Work requests have been in flight for `limit` without a completion.
  bool stalled(Clock::time_point now, std::chrono::milliseconds limit) const;

  // All below under the transport's lock.
  void enqueue(Piece piece);
  void pump();
  // Completions and rdma_cm events; a failure is recorded (failure()) for
  // the channel to act on, never acted on here. Returns completions taken.
  int poll();
  // Declares the rail failed (a port went down, a stall): the QP goes to
  // the error state first, so the NIC touches none of its memory again.
  void mark_failed(Errc code, std::string message);
  // The rail failed and others carry on: what never reached the wire, and
  // reads and writes in flight, move to `retry`; atomics and calls in
  // flight fail, since the server may have applied them.
  void evacuate(std::vector<Piece>& retry);
  // The rail failed and no other is left: everything it holds fails.
  void fail_all(Errc code, const std::string& reason);
  void drop(const Completion& completion);
  void add_region(std::uint64_t handle, std::byte* base, std::size_t length);
  void remove_region(std::uint64_t handle);
  std::string stall_report() const;

 private:
  struct PendingCall {
    CompletionPtr completion;
    Bytes* reply = nullptr;
  };
  struct LocalRegion {
    std::uint64_t handle;
    std::size_t length;
    MrPtr mr;
  };
  void complete(std::uint32_t slot);
  void on_reply(std::uint32_t slot, std::size_t length);
  void on_failed_completion(const ibv_wc& wc);
  // The lkey of a registered region holding [p, p + length), or 0.
  std::uint32_t registered(const void* p, std::size_t length) const;

  std::string peer_;
  // Destroyed bottom-up: the id (and its QP) before the MRs, CQ and PD it uses.
  EventChannelPtr events_;
  PdPtr pd_;
  CqPtr cq_;
  std::vector<std::byte> staging_;
  MrPtr staging_mr_;
  std::map<const std::byte*, LocalRegion> local_;  // by base address
  std::vector<std::byte> replies_;  // kCallCredits receives of kReplyMessage
  MrPtr replies_mr_;
  IdPtr id_;
  std::uint8_t server_rail_ = 0;
  std::vector<std::optional<Piece>> in_flight_;  // by slot (= wr_id)
  std::vector<std::uint32_t> free_slots_;
  std::deque<Piece> backlog_;
  std::deque<std::uint32_t> posted_;  // slots in flight, in posting order
  std::uint32_t unsignalled_ = 0;     // WRs posted since the last signalled one
  PendingTable<PendingCall> calls_;   // calls sent, by the token their SEND carried
  std::uint32_t credits_used_ = 0;    // calls sent whose reply has not come (abandoned ones too)
  Clock::time_point last_completion_ = Clock::now();  // for stall_report
  Clock::time_point progress_since_ = Clock::now();   // the last completion, or the post into an idle queue
  std::string device_;
  std::string route_;  // "rxe0 port 1, GID 1 (RoCE v2, 10.0.2.15)": what rdma_cm chose
  std::optional<RailFailure> failure_;
};

}  // namespace smb::transport::verbs
