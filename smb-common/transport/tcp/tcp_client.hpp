#pragma once
// A client's side of the tcp transport: three TCP connections per server
// (streams), and two threads per stream, so that neither direction waits
// for the other or for the caller.
//
//   streams    Reads go on their own stream, atomics on a third, writes
//              and calls on the first. On one stream a read's request
//              queued behind a megabyte of write payload, and smbd's thread
//              for the stream, busy receiving that payload, answered it only
//              after: a worker pushing and pulling at once (the update
//              engine's exchange) left its inbound link idle meanwhile.
//              Two streams make the two directions independent, as two
//              flows; smbd serves each with its own thread. Atomics get
//              the third: a worker polling a counter (the exchange's
//              chunk-ready counts) waited behind its own pushes' payload,
//              and the pulls behind the poll.
//
//   sending    An op goes out from the caller's thread at once, without
//              blocking (MSG_DONTWAIT), while nothing is queued before it;
//              what the socket's buffer cannot take yet is queued, and the
//              channel's sender thread sends it, blocking, from the
//              caller's memory (valid until the op completes).
//   receiving  The receiver thread reads each reply's header, then its data
//              with one recv() straight into the caller's memory.
//
// Completions finish on the receiver thread; a caller waiting in progress()
// sleeps until one does (client_idle.hpp). An op abandoned after a timeout
// while its bytes are on the wire closes the channel: its memory may no
// longer be read or written, and the stream cannot skip the rest. One whose
// reply is already being read gets kReplyLanding to land first.
#include "transport/channel_health.hpp"
#include "transport/pending_table.hpp"
#include "transport/tcp/tcp_wire.hpp"
#include "transport/transport.hpp"
#include "util/fd.hpp"

#include <array>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace smb::transport::tcp {

class TcpChannel;

// How long an abandoned op's reply, already arriving, may take to land
// before the channel closes instead (TcpChannel::drop).
inline constexpr std::chrono::milliseconds kReplyLanding{250};

class TcpClientTransport final : public ClientTransport {
 public:
  std::string name() const override { return "tcp"; }
  const Bytes& address() const override { return address_; }
  std::unique_ptr<Channel> connect(const Bytes& server_address, const std::string& peer,
                                   std::span<const std::uint8_t> ticket) override;
  void progress() override;
  void abandon(const Completion& completion) override;
  // The kernel copies from and to any memory: nothing to register.
  std::optional<std::uint64_t> register_memory(void*, std::size_t) override { return std::nullopt; }
  void unregister_memory(std::uint64_t) override {}

 private:
  friend class TcpChannel;
  void completed();  // a channel finished ops: waiters look again
  void add(TcpChannel* channel);
  void remove(TcpChannel* channel);

  std::mutex mutex_;  // guards all below
  std::condition_variable idle_;
  std::uint64_t generation_ = 0;  // advanced by every batch of completions
  unsigned sleepers_ = 0;
  std::vector<TcpChannel*> channels_;
  Bytes address_;  // clients dial out: no address of their own
};

class TcpRemoteSegment final : public RemoteSegment {
 public:
  explicit TcpRemoteSegment(SegmentDescriptor descriptor) : descriptor_(std::move(descriptor)) {}
  const SegmentDescriptor& descriptor() const override { return descriptor_; }

 private:
  SegmentDescriptor descriptor_;
};

class TcpChannel final : public Channel {
 public:
  TcpChannel(TcpClientTransport& transport, const Bytes& server_address, std::string peer,
             std::span<const std::uint8_t> ticket);
  ~TcpChannel() override;

  std::string describe() const override;
  std::unique_ptr<RemoteSegment> attach(const SegmentDescriptor& segment) override;
  void put(RemoteSegment& seg, std::uint64_t offset, const void* src, std::size_t length,
           const CompletionPtr& completion) override;
  void get(RemoteSegment& seg, std::uint64_t offset, void* dst, std::size_t length,
           const CompletionPtr& completion) override;
  void fetch_add(RemoteSegment& seg, std::uint64_t offset, std::uint64_t value, std::uint64_t* old_value,
                 const CompletionPtr& completion) override;
  void compare_swap(RemoteSegment& seg, std::uint64_t offset, std::uint64_t expected, std::uint64_t desired,
                    std::uint64_t* old_value, const CompletionPtr& completion) override;
  void call(std::span<const std::uint8_t> frame, std::span<const std::byte> payload, Bytes* reply,
            const CompletionPtr& completion) override;
  ChannelCaps caps() const override;
  void peer_lost(const std::string& reason) override;
  std::optional<std::string> failure() const override;
  std::string stall_report() const override;

  // Forgets the ops of `completion` (TcpClientTransport::abandon).
  void drop(const Completion& completion);

 private:
  struct Stream;
  // An op sent, until its reply came: where the reply's data goes.
  struct PendingOp {
    CompletionPtr completion;
    Kind kind = Kind::put;
    const char* what = "";
    void* dst = nullptr;  // get: length bytes; atomic: 8 bytes
    std::size_t length = 0;
    Bytes* reply = nullptr;  // call
  };
  // A request on its way out: the header, a call's frame, then the data.
  struct Outgoing {
    CompletionPtr completion;
    RequestHeader header;
    std::vector<std::uint8_t> frame;
    const void* data = nullptr;
    std::size_t data_length = 0;
    std::size_t sent = 0;  // bytes of the three already with the kernel
    std::size_t total() const { return sizeof header + frame.size() + data_length; }
  };

  // One TCP connection and its two threads.
  struct Stream {
    util::UniqueFd fd;
    std::mutex send_mutex;  // guards queue, sending, stopping
    std::condition_variable send_cv;
    std::deque<Outgoing> queue;  // in stream order; the front may be partly sent
    bool sending = false;        // the sender thread works on queue.front()
    bool stopping = false;
    const Completion* receiving = nullptr;  // under the channel's mutex_: whose data the receiver reads
    std::thread sender;
    std::thread receiver;
  };

  // A request's header for an op on `seg` (puts and atomics add to it).
  static Outgoing request(Kind kind, const RemoteSegment& seg, std::uint64_t offset, std::uint64_t length,
                          const CompletionPtr& completion);
  void atomic(AtomicOp op, const char* what, RemoteSegment& seg, std::uint64_t offset, std::uint64_t operand,
              std::uint64_t compare, std::uint64_t* old_value, const CompletionPtr& completion);
  // Reads, and atomics, each on a stream of their own (see the top).
  Stream& stream_for(Kind kind) {
    return streams_[kind == Kind::get ? 1 : kind == Kind::atomic ? 2 : 0];
  }
  void open(Stream& s, const std::string& host, std::uint16_t port, std::span<const std::uint8_t> ticket);
  void submit(Outgoing out, PendingOp op);
  void send_loop(Stream& s);
  void receive_loop(Stream& s);
  // False when the stream broke.
  bool receive_reply(Stream& s, const ReplyHeader& h);
  void fail(Errc code, const std::string& reason);
  bool drop_from(Stream& s, const Completion& completion);  // true when the channel must close
  void shut_down();  // both streams' sockets

  TcpClientTransport& transport_;
  std::string peer_;
  std::string host_port_;  // the data port's, for describe()

  mutable std::mutex mutex_;  // guards pending_, health_, each stream's `receiving`
  std::condition_variable received_;  // a stream's `receiving` changed
  PendingTable<PendingOp> pending_;
  ChannelHealth health_;

  mutable std::array<Stream, 3> streams_;  // writes and calls; reads; atomics (mutable: stall_report locks)
};

}  // namespace smb::transport::tcp
