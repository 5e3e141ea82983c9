#pragma once
// A client's side of the native verbs transport: one channel per server,
// made of rails (verbs_rail.hpp) -- one RC QP per server port the client
// reaches, each from its own local port where it has one on that port's
// subnet -- with one-sided RDMA READ/WRITE and atomics on them.
//
// Striping (issue 37 item 3): reads and writes are cut at 128 KiB
// boundaries of the server's memory, and each 128 KiB of it always goes
// over the same rail while the rails stand, so two ops on the same bytes
// keep one QP's order. Atomics and calls take the first rail that stands,
// so a word's atomics are done by one server device (NIC atomics are
// atomic per device only) and calls stay in order. When a rail fails (a
// failed completion, a port down, no completion for SMB_RDMA_RAIL_STALL_MS
// while another rail works), its queued ops and its reads and writes in
// flight go over the others; its atomics and calls in flight fail, since
// the server may have applied them. The last rail's failure is the
// channel's, as with one QP.
#include "transport/channel_health.hpp"
#include "transport/transport.hpp"
#include "transport/verbs/verbs_rail.hpp"

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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
  // A port's async events (IBV_EVENT_PORT_ERR): its rails fail at once.
  void watch_ports(Rail::Clock::time_point now);
  friend class VerbsChannel;
  struct Region {
    std::byte* base;
    std::size_t length;
  };
  std::mutex mutex_;  // guards the channel list, the regions and every channel's queues
  std::vector<VerbsChannel*> channels_;
  std::map<std::uint64_t, Region> regions_;  // by handle
  std::uint64_t next_region_ = 1;
  Rail::Clock::time_point next_port_watch_{};
  Bytes address_;  // clients need no address of their own: they dial out
};

class VerbsRemoteSegment final : public RemoteSegment {
 public:
  VerbsRemoteSegment(SegmentDescriptor descriptor, const RailKeys& rkeys)
      : descriptor_(std::move(descriptor)), rkeys_(rkeys) {}
  const SegmentDescriptor& descriptor() const override { return descriptor_; }
  const RailKeys& rkeys() const { return rkeys_; }

 private:
  SegmentDescriptor descriptor_;
  RailKeys rkeys_;  // by the server's rail
};

class VerbsChannel final : public Channel {
 public:
  // `ticket`: the session's (ChannelAdmission), sent with each rail's connect request.
  VerbsChannel(VerbsClientTransport& transport, const ServerAddress& server, std::string peer,
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
  // Connects one more rail to each other port of the server this host
  // reaches (one per server port, at most SMB_RDMA_RAILS in all).
  void connect_more_rails(const ServerAddress& server, std::span<const std::uint8_t> ticket);

  // All under transport_.mutex_.
  // The rail a piece goes over: its 128 KiB of server memory's, or the
  // first standing one for atomics and calls; null when none stands.
  Rail* rail_for(const Piece& piece);
  void route(Piece piece);
  // Cuts an op into pieces at 128 KiB boundaries of the server's memory.
  void split(Piece piece, std::size_t length);
  int progress(Rail::Clock::time_point now);
  // A rail failed: its work goes over the others, or the channel fails.
  void on_rail_failed(Rail& rail);
  // Fails rails that stall while another one works, and those on a port that went down.
  void watch_rails(Rail::Clock::time_point now);
  void port_down(ibv_context* context, std::uint8_t port);
  void fail(Errc code, const std::string& message);
  void drop(const Completion& completion);
  void add_region(std::uint64_t handle, std::byte* base, std::size_t length);
  void remove_region(std::uint64_t handle);

  VerbsClientTransport& transport_;
  std::string peer_;
  std::vector<std::unique_ptr<Rail>> rails_;  // [0]: through the control host's address
  std::vector<Rail*> standing_;               // the rails that have not failed, in order
  std::vector<std::string> not_connected_;    // other server ports, and why no rail reaches them
  Rail::Clock::time_point next_watch_{};
  ChannelHealth health_;
};

}  // namespace smb::transport::verbs
