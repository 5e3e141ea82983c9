#include "copy_puller.hpp"

#include "protocol/segment_codec.hpp"
#include "transport/client_idle.hpp"

#include <spdlog/spdlog.h>

#include <array>
#include <chrono>
#include <thread>

namespace smb::server {

using protocol::Body;

namespace {

constexpr const char* kWhat = "pull_copy";
constexpr std::uint64_t kChunk = 4u << 20;           // bytes per get
constexpr std::size_t kInFlight = 4;                  // gets outstanding at once
constexpr std::size_t kMaxRanges = 1u << 16;          // per request
constexpr std::size_t kMaxPeerName = 256;             // "host:port", for messages only
constexpr std::size_t kMaxTransportBlob = 64u << 10;  // an address or a remote key
constexpr auto kChunkTimeout = std::chrono::seconds(60);

struct Range {
  std::uint64_t offset = 0, length = 0;
};

std::vector<Range> ranges_of(const Body& request, std::uint64_t target_length, std::uint64_t source_length) {
  const auto it = request.find("ranges");
  if (it == request.end() || !it->is_array() || it->size() > kMaxRanges)
    throw Error(Errc::invalid_argument,
                "pull_copy: 'ranges' must be an array of at most " + std::to_string(kMaxRanges) + " [offset, length]");
  std::vector<Range> out;
  for (const auto& r : *it) {
    if (!r.is_array() || r.size() != 2 || !r[0].is_number_unsigned() || !r[1].is_number_unsigned())
      throw Error(Errc::invalid_argument, "pull_copy: each range is [offset, length], two unsigned integers");
    const Range range{r[0].get<std::uint64_t>(), r[1].get<std::uint64_t>()};
    const auto limit = std::min(target_length, source_length);
    if (range.length == 0 || range.offset > limit || range.length > limit - range.offset)
      throw Error(Errc::invalid_argument, "pull_copy: range [" + std::to_string(range.offset) + ", +" +
                                              std::to_string(range.length) + ") is empty or outside the copies (" +
                                              std::to_string(target_length) + " bytes here, " +
                                              std::to_string(source_length) + " at the source)");
    out.push_back(range);
  }
  return out;
}

protocol::Bytes bounded_binary(const Body& request, const char* field) {
  auto bytes = protocol::get_binary(request, field, kWhat);
  if (bytes.size() > kMaxTransportBlob)
    throw Error(Errc::invalid_argument, std::string("pull_copy: '") + field + "' is larger than any transport's");
  return bytes;
}

}  // namespace

CopyPuller::CopyPuller(std::string transport, transport::TransportOptions options, SegmentStore& store)
    : transport_(std::move(transport)), options_(std::move(options)), store_(store) {}

CopyPuller::~CopyPuller() = default;

transport::ClientTransport& CopyPuller::client() {
  std::lock_guard lock(mutex_);
  if (!client_) {
    try {
      client_ = transport::make_client_transport(transport_, options_);
    } catch (const Error& e) {
      // Errc::transport: the repairing client then copies through itself.
      throw Error(Errc::transport, "pull_copy: this smbd cannot reach other servers over " + transport_ + ": " +
                                       e.what());
    }
  }
  return *client_;
}

void CopyPuller::warm() {
  if (transport_.empty()) return;
  try {
    client();
  } catch (const Error& e) {
    spdlog::debug("{}", e.what());
  }
}

Body CopyPuller::pull(const Body& request) {
  const auto name = protocol::get_segment_name(request, "name", kWhat);
  const auto from = protocol::get_string(request, "from", kWhat);
  if (from.empty() || from.size() > kMaxPeerName)
    throw Error(Errc::invalid_argument, "pull_copy: 'from' must name the source server (host:port)");
  const auto address = bounded_binary(request, "address");
  const auto ticket = bounded_binary(request, "ticket");
  const auto segment = request.find("segment");
  if (segment == request.end() || !segment->is_object())
    throw Error(Errc::invalid_argument, "pull_copy: 'segment' must be the source's open_segment reply");
  const auto source = protocol::segment_from(*segment, "pull_copy: segment");
  if (source.remote_key.size() > kMaxTransportBlob)
    throw Error(Errc::invalid_argument, "pull_copy: the source's remote key is larger than any transport's");
  const auto target = store_.access(name);
  const auto ranges = ranges_of(request, target.length, source.length);

  auto& transport = client();
  const MemoryPool::Foreground foreground(store_.pool());
  const auto context = "pull_copy of '" + name + "' from server " + from;
  std::unique_ptr<transport::Channel> channel;
  std::unique_ptr<transport::RemoteSegment> remote;
  try {
    channel = transport.connect(address, from, ticket);
    remote = channel->attach(source);
  } catch (const Error& e) {
    throw Error(e.code(), context + ": " + e.what());
  }

  // One pull's reads at a time (the others connect meanwhile): two at once
  // shared this smbd's one client worker, and over TCP took 2.4x as long as
  // one, where two in turn take twice as long (docs/reliability.md).
  const std::lock_guard turn(turn_);
  // Each range in chunks, kInFlight at once, each read straight into this
  // server's segment (the copy being rebuilt: no client reads or writes it).
  struct Get {
    transport::CompletionPtr completion;
    std::chrono::steady_clock::time_point deadline;
  };
  std::array<Get, kInFlight> ring;
  const auto finish = [&](Get& get) {
    const transport::PollingThread polling;
    while (!get.completion->done()) {
      transport.progress();
      if (auto failure = channel->failure()) {
        transport.abandon(*get.completion);
        throw Error(Errc::server_gone, context + ": " + *failure);
      }
      if (std::chrono::steady_clock::now() > get.deadline) {
        transport.abandon(*get.completion);
        throw Error(Errc::timeout, context + ": a read of " + std::to_string(kChunk >> 20) +
                                       " MiB took over a minute");
      }
    }
    try {
      get.completion->throw_if_failed();
    } catch (const Error& e) {
      throw Error(e.code(), context + ": " + e.what());
    }
    get.completion.reset();
  };
  std::uint64_t bytes = 0;
  struct Linger {  // on every way out, after the gets below have ended
    CopyPuller& self;
    std::unique_ptr<transport::Channel>& channel;
    std::unique_ptr<transport::RemoteSegment>& remote;
    ~Linger() { self.linger(std::move(channel), std::move(remote)); }
  } lingers{*this, channel, remote};
  try {
    std::size_t next = 0;
    for (const auto& range : ranges) {
      for (std::uint64_t at = range.offset; at < range.offset + range.length; at += kChunk) {
        auto& get = ring[next++ % ring.size()];
        if (get.completion) finish(get);
        const auto length = std::min(kChunk, range.offset + range.length - at);
        get.completion = std::make_shared<transport::Completion>();
        get.completion->expect();
        get.deadline = std::chrono::steady_clock::now() + kChunkTimeout;
        channel->get(*remote, at, target.base + at, length, get.completion);
        bytes += length;
      }
    }
    for (auto& get : ring)
      if (get.completion) finish(get);
  } catch (...) {
    // No late reply may land after the error is answered.
    for (auto& get : ring)
      if (get.completion) transport.abandon(*get.completion);
    throw;
  }
  return protocol::ok_reply({{"bytes", bytes}});
}

void CopyPuller::linger(std::unique_ptr<transport::Channel> channel, std::unique_ptr<transport::RemoteSegment> remote) {
  constexpr auto kLinger = std::chrono::seconds(3);
  const auto now = std::chrono::steady_clock::now();
  std::vector<Lingering> expired;  // closed outside the lock
  std::lock_guard lock(lingering_mutex_);
  for (auto it = lingering_.begin(); it != lingering_.end();) {
    if (now - it->done > kLinger) {
      expired.push_back(std::move(*it));
      it = lingering_.erase(it);
    } else {
      ++it;
    }
  }
  lingering_.push_back({now, std::move(channel), std::move(remote)});
}

}  // namespace smb::server
