#include "transport/verbs/verbs_client.hpp"

#include "transport/client_idle.hpp"
#include "transport/verbs/verbs_calls.hpp"
#include "util/parse.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>

namespace smb::transport::verbs {
namespace {

// The server's host from "host:port" (the control-plane peer).
std::string host_of(const std::string& peer) {
  const auto colon = peer.rfind(':');
  std::string host = colon == std::string::npos ? peer : peer.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return host;
}

// A whole number from the environment, `fallback` where unset; anything
// else than 1..max is refused naming the variable.
unsigned env_number(const char* name, unsigned fallback, unsigned max) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const unsigned long value = std::strtoul(text, &end, 10);
  if (*end != '\0' || value < 1 || value > max)
    throw Error(Errc::invalid_argument, std::string(name) + "='" + text + "' is not a whole number from 1 to " +
                                            std::to_string(max));
  return static_cast<unsigned>(value);
}

// How many rails a channel may have (SMB_RDMA_RAILS; 1: one QP per server).
unsigned max_rails() { return env_number("SMB_RDMA_RAILS", kMaxRails, kMaxRails); }
// How long a rail's work requests may go without a completion, while
// another rail works, before its work goes elsewhere (SMB_RDMA_RAIL_STALL_MS).
std::chrono::milliseconds rail_stall_limit() {
  static const auto limit = std::chrono::milliseconds(env_number("SMB_RDMA_RAIL_STALL_MS", 3000, 3'600'000));
  return limit;
}
constexpr auto kWatchEvery = std::chrono::milliseconds(20);

void set_port(sockaddr_storage& address, std::uint16_t port) {
  if (address.ss_family == AF_INET6)
    reinterpret_cast<sockaddr_in6&>(address).sin6_port = htons(port);
  else
    reinterpret_cast<sockaddr_in&>(address).sin_port = htons(port);
}

}  // namespace

// ---------------------------------------------------------------- transport

VerbsClientTransport::VerbsClientTransport() = default;
VerbsClientTransport::~VerbsClientTransport() = default;

std::unique_ptr<Channel> VerbsClientTransport::connect(const Bytes& server_address, const std::string& peer,
                                                       std::span<const std::uint8_t> ticket) {
  return std::make_unique<VerbsChannel>(*this, decode_address(server_address, peer), peer, ticket);
}

void VerbsClientTransport::progress() {
  int done = 0;
  {
    std::lock_guard lock(mutex_);
    const auto now = Rail::Clock::now();
    for (auto* c : channels_) done += c->progress(now);
    watch_ports(now);
  }
  yield_when_idle(done != 0);
}

// Reads the async events of every device a rail uses (a few times a
// second, not per progress call: a read is a system call). A port that went
// down fails its rails at once; without this they would wait for the stall
// watch (a peer's port down, seen by no local event, still does).
void VerbsClientTransport::watch_ports(Rail::Clock::time_point now) {
  if (now < next_port_watch_) return;
  next_port_watch_ = now + kWatchEvery;
  std::set<ibv_context*> contexts;
  for (auto* c : channels_)
    for (auto* rail : c->standing_) contexts.insert(rail->context());
  for (ibv_context* context : contexts) {
    // librdmacm opened the device; its async fd is ours to read, without blocking.
    const int flags = ::fcntl(context->async_fd, F_GETFL);
    if ((flags & O_NONBLOCK) == 0) ::fcntl(context->async_fd, F_SETFL, flags | O_NONBLOCK);
    ibv_async_event event{};
    while (ibv_get_async_event(context, &event) == 0) {
      const auto type = event.event_type;
      const auto port = static_cast<std::uint8_t>(event.element.port_num);
      ibv_ack_async_event(&event);
      if (type == IBV_EVENT_PORT_ERR)
        for (auto* c : channels_) c->port_down(context, port);
    }
  }
}

void VerbsClientTransport::abandon(const Completion& completion) {
  std::lock_guard lock(mutex_);
  for (auto* c : channels_) c->drop(completion);
}

std::optional<std::uint64_t> VerbsClientTransport::register_memory(void* base, std::size_t length) {
  if (base == nullptr || length == 0) throw Error(Errc::invalid_argument, "register_memory: empty region");
  std::lock_guard lock(mutex_);
  const std::uint64_t handle = next_region_++;
  auto* bytes = static_cast<std::byte*>(base);
  try {
    for (auto* c : channels_) c->add_region(handle, bytes, length);
  } catch (...) {
    for (auto* c : channels_) c->remove_region(handle);
    throw;
  }
  regions_.emplace(handle, Region{bytes, length});
  return handle;
}

void VerbsClientTransport::unregister_memory(std::uint64_t handle) {
  std::lock_guard lock(mutex_);
  for (auto* c : channels_) c->remove_region(handle);
  regions_.erase(handle);
}

// ---------------------------------------------------------------- channel

VerbsChannel::VerbsChannel(VerbsClientTransport& transport, const ServerAddress& server, std::string peer,
                           std::span<const std::uint8_t> ticket)
    : transport_(transport), peer_(std::move(peer)) {
  const std::string where = "server " + peer_;
  const auto deadline = Rail::Clock::now() + util::connect_timeout();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string host = host_of(peer_);
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(server.port).c_str(), &hints, &found); rc != 0)
    throw Error(Errc::unreachable, where + ": cannot resolve '" + host + "': " + gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> info(found, &::freeaddrinfo);
  std::string chose_by;
  auto source = choose_source(info->ai_addr, chose_by, ("libsmb: " + where).c_str());
  rails_.push_back(std::make_unique<Rail>(info->ai_addr, source, chose_by, peer_, ticket, deadline));
  if (chose_by != "SMB_RDMA_GID_INDEX") connect_more_rails(server, ticket);  // a GID index pins the one path

  std::lock_guard lock(transport_.mutex_);
  for (auto& rail : rails_) {
    for (const auto& [handle, region] : transport_.regions_) rail->add_region(handle, region.base, region.length);
    standing_.push_back(rail.get());
  }
  transport_.channels_.push_back(this);
  spdlog::debug("libsmb: server {} via {}", peer_, describe());
}

void VerbsChannel::connect_more_rails(const ServerAddress& server, std::span<const std::uint8_t> ticket) {
  const unsigned most = max_rails();
  // Local sources taken, so that rails spread over local ports too.
  std::vector<sockaddr_storage> used{rails_.front()->local_address()};
  for (std::size_t i = 0; i < server.rails.size() && rails_.size() < most; ++i) {
    if (i == rails_.front()->server_rail()) continue;
    sockaddr_storage target = server.rails[i];
    const auto text = address_text(reinterpret_cast<const sockaddr*>(&target));
    auto source = rail_source(reinterpret_cast<const sockaddr*>(&target), used);
    if (!source) {
      not_connected_.push_back(text + ": no local address on its subnet");
      continue;
    }
    set_port(target, server.port);
    try {
      auto rail = std::make_unique<Rail>(reinterpret_cast<const sockaddr*>(&target), source, "", peer_, ticket,
                                         Rail::Clock::now() + util::connect_timeout());
      if (rail->server_rail() != i || !device_wanted(rail->device())) {
        not_connected_.push_back(text + ": " + (rail->server_rail() != i ? "accepted on another of its ports"
                                                                         : "not a device SMB_RDMA_DEVICE names"));
        continue;
      }
      used.push_back(*source);
      rails_.push_back(std::move(rail));
    } catch (const Error& e) {
      // One port unreachable costs that port's share, not the channel.
      spdlog::info("libsmb: server {}: no rail to its port at {}: {}", peer_, text, e.what());
      not_connected_.push_back(text + ": " + e.what());
    }
  }
}

VerbsChannel::~VerbsChannel() {
  std::lock_guard lock(transport_.mutex_);
  std::erase(transport_.channels_, this);
  // Our own close: fail what is left without a "gone" warning.
  health_.fail("server " + peer_ + ": connection closed");
  fail(Errc::server_gone, health_.reason());
}

std::string VerbsChannel::describe() const {
  std::string routes;
  for (const auto& rail : rails_) routes += (routes.empty() ? "" : " and ") + rail->route();
  std::string text = "verbs rdma via " + routes + " (rc, one-sided read/write/atomics, calls by send/recv";
  if (rails_.size() > 1) text += "; " + std::to_string(rails_.size()) + " rails, striped per 128 KiB";
  return text + ")";
}

void VerbsChannel::peer_lost(const std::string& reason) {
  std::lock_guard lock(transport_.mutex_);
  fail(Errc::server_gone, "server " + peer_ + " is gone: " + reason);
}

std::optional<std::string> VerbsChannel::failure() const {
  std::lock_guard lock(transport_.mutex_);
  return health_.failure();
}

std::string VerbsChannel::stall_report() const {
  std::lock_guard lock(transport_.mutex_);
  std::string text;
  for (const auto& rail : rails_) text += (text.empty() ? "" : "; ") + rail->stall_report();
  if (health_.failed()) text += ", failed: " + health_.reason();
  return text;
}

// Fails everything queued or in flight on every rail; the channel is done.
void VerbsChannel::fail(Errc code, const std::string& message) {
  if (health_.fail(message) && code == Errc::server_gone) spdlog::warn("libsmb: {}", message);
  const std::string& reason = health_.reason();
  standing_.clear();
  for (auto& rail : rails_) {
    rail->mark_failed(code, reason);
    rail->fail_all(code, reason);
  }
}

void VerbsChannel::drop(const Completion& completion) {
  for (auto& rail : rails_) rail->drop(completion);
}

int VerbsChannel::progress(Rail::Clock::time_point now) {
  int done = 0;
  for (std::size_t i = 0; i < standing_.size();) {
    Rail& rail = *standing_[i];
    done += rail.poll();
    if (rail.failed()) {
      on_rail_failed(rail);  // takes it out of standing_
      continue;
    }
    rail.pump();
    ++i;
  }
  if (now >= next_watch_) {
    next_watch_ = now + kWatchEvery;
    watch_rails(now);
  }
  return done;
}

void VerbsChannel::on_rail_failed(Rail& rail) {
  std::erase(standing_, &rail);
  if (health_.failed()) return;
  const RailFailure failure = *rail.failure();
  if (standing_.empty()) return fail(failure.code, failure.message);
  spdlog::warn("libsmb: server {}: its rail via {} failed ({}); {} rail(s) left carry its traffic", peer_,
               rail.route(), failure.message, standing_.size());
  std::vector<Piece> retry;
  rail.evacuate(retry);
  for (auto& piece : retry) route(std::move(piece));
}

void VerbsChannel::watch_rails(Rail::Clock::time_point now) {
  if (standing_.size() < 2) return;  // one rail stalled is the op's timeout to report (stall_report)
  const auto limit = rail_stall_limit();
  const bool one_works =
      std::any_of(standing_.begin(), standing_.end(), [&](const Rail* r) { return !r->stalled(now, limit); });
  if (!one_works) return;  // all stalled: the server or the network, not one port
  for (auto* rail : std::vector<Rail*>(standing_))
    if (rail->stalled(now, limit)) {
      rail->mark_failed(Errc::transport, "server " + peer_ + ": no completion on its rail via " + rail->device() +
                                             " for " + std::to_string(limit.count()) +
                                             " ms while another rail works (SMB_RDMA_RAIL_STALL_MS)");
      on_rail_failed(*rail);
    }
}

void VerbsChannel::port_down(ibv_context* context, std::uint8_t port) {
  for (auto* rail : std::vector<Rail*>(standing_))
    if (rail->context() == context && rail->port() == port) {
      rail->mark_failed(Errc::transport, "server " + peer_ + ": local port " + rail->device() + "/" +
                                             std::to_string(port) + " went down");
      on_rail_failed(*rail);
    }
}

Rail* VerbsChannel::rail_for(const Piece& piece) {
  if (standing_.empty()) return nullptr;
  if (!piece.repeatable()) return standing_.front();
  return standing_[(piece.remote / kSlot) % standing_.size()];
}

void VerbsChannel::route(Piece piece) {
  Rail* rail = rail_for(piece);
  if (rail == nullptr) return piece.completion->finish(Errc::server_gone, health_.reason());
  rail->enqueue(std::move(piece));
}

// Cuts an op into pieces that each lie within one 128 KiB of the server's
// memory (at most a slot each); each piece finishes the completion once.
void VerbsChannel::split(Piece piece, std::size_t length) {
  const std::uint64_t first = piece.remote / kSlot, last = (piece.remote + std::max<std::size_t>(length, 1) - 1) / kSlot;
  if (last > first) piece.completion->expect(static_cast<int>(last - first));
  for (std::size_t done = 0; done < length || done == 0;) {
    const std::uint64_t at = piece.remote + done;
    const std::size_t take = std::min<std::size_t>(kSlot - at % kSlot, length - done);
    Piece p = piece;
    p.remote = at;
    if (p.src != nullptr) p.src += done;
    if (p.dst != nullptr) p.dst += done;
    p.length = static_cast<std::uint32_t>(take);
    route(std::move(p));
    if (take == 0) break;  // an empty op: one empty piece
    done += take;
  }
}

std::unique_ptr<RemoteSegment> VerbsChannel::attach(const SegmentDescriptor& segment) {
  const auto& key = segment.remote_key;
  RailKeys rkeys{};
  if (key.empty() || key.size() % sizeof rkeys[0] != 0 || key.size() > sizeof rkeys)
    throw Error(Errc::protocol, "server " + peer_ + ": segment " + std::to_string(segment.id) +
                                    " has no verbs rkey (is smbd running with --transport verbs?)");
  std::memcpy(rkeys.data(), key.data(), key.size());
  std::lock_guard lock(transport_.mutex_);
  health_.throw_if_failed();
  const std::size_t keys = key.size() / sizeof rkeys[0];
  for (const auto& rail : rails_)
    if (rail->server_rail() >= keys)
      throw Error(Errc::protocol, "server " + peer_ + ": segment " + std::to_string(segment.id) + " has " +
                                      std::to_string(keys) + " rkey(s), none for its port " +
                                      std::to_string(rail->server_rail()) + " that a rail reaches");
  return std::make_unique<VerbsRemoteSegment>(segment, rkeys);
}

void VerbsChannel::put(RemoteSegment& seg, std::uint64_t offset, const void* src, std::size_t length,
                       const CompletionPtr& completion) {
  auto& remote = static_cast<VerbsRemoteSegment&>(seg);
  std::lock_guard lock(transport_.mutex_);
  if (!health_.admit(completion, "write")) return;
  Piece p{.completion = completion, .opcode = IBV_WR_RDMA_WRITE, .remote = remote.descriptor().address + offset,
          .rkeys = remote.rkeys(), .src = static_cast<const std::byte*>(src)};
  split(std::move(p), length);
}

void VerbsChannel::get(RemoteSegment& seg, std::uint64_t offset, void* dst, std::size_t length,
                       const CompletionPtr& completion) {
  auto& remote = static_cast<VerbsRemoteSegment&>(seg);
  std::lock_guard lock(transport_.mutex_);
  if (!health_.admit(completion, "read")) return;
  Piece p{.completion = completion, .opcode = IBV_WR_RDMA_READ, .remote = remote.descriptor().address + offset,
          .rkeys = remote.rkeys(), .dst = static_cast<std::byte*>(dst)};
  split(std::move(p), length);
}

// `operand` is the value to add or to swap in; `compare` is compare-swap's expected value.
void VerbsChannel::atomic(ibv_wr_opcode opcode, const char* what, RemoteSegment& seg, std::uint64_t offset,
                          std::uint64_t operand, std::uint64_t compare, std::uint64_t* old_value,
                          const CompletionPtr& completion) {
  auto& remote = static_cast<VerbsRemoteSegment&>(seg);
  std::lock_guard lock(transport_.mutex_);
  if (!health_.admit(completion, what)) return;
  // RDMA atomics need an 8-byte aligned remote address.
  if ((remote.descriptor().address + offset) % 8 != 0)
    return completion->finish(Errc::invalid_argument, std::string(what) + ": offset is not 8-byte aligned");
  route(Piece{.completion = completion, .opcode = opcode, .remote = remote.descriptor().address + offset,
              .rkeys = remote.rkeys(), .dst = reinterpret_cast<std::byte*>(old_value), .length = 8,
              .operand = operand, .compare = compare});
}

void VerbsChannel::fetch_add(RemoteSegment& seg, std::uint64_t offset, std::uint64_t value,
                             std::uint64_t* old_value, const CompletionPtr& completion) {
  atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, "fetch-add", seg, offset, value, 0, old_value, completion);
}

void VerbsChannel::compare_swap(RemoteSegment& seg, std::uint64_t offset, std::uint64_t expected,
                                std::uint64_t desired, std::uint64_t* old_value,
                                const CompletionPtr& completion) {
  atomic(IBV_WR_ATOMIC_CMP_AND_SWP, "compare-swap", seg, offset, desired, expected, old_value, completion);
}

void VerbsChannel::add_region(std::uint64_t handle, std::byte* base, std::size_t length) {
  for (auto& rail : rails_) rail->add_region(handle, base, length);
}

void VerbsChannel::remove_region(std::uint64_t handle) {
  for (auto& rail : rails_) rail->remove_region(handle);
}

// ---------------------------------------------------------------- calls

ChannelCaps VerbsChannel::caps() const {
  return ChannelCaps{
      .native_atomics = true,
      // An RC QP errors out when the server stops answering, and rdma_cm
      // reports its disconnect: no need to watch the control connection.
      .detects_peer_failure = true,
      .registration_helps = true,
      .max_call_payload = kCallMessage - sizeof(CallHeader) - kCallFrameRoom,
  };
}

void VerbsChannel::call(std::span<const std::uint8_t> frame, std::span<const std::byte> payload, Bytes* reply,
                        const CompletionPtr& completion) {
  std::lock_guard lock(transport_.mutex_);
  if (!health_.admit(completion, "call")) return;
  if (frame.size() > kCallFrameRoom || payload.size() > caps().max_call_payload)
    return completion->finish(Errc::invalid_argument, "server " + peer_ + ": call too large for one message");
  route(Piece{.completion = completion, .opcode = IBV_WR_SEND, .src = payload.data(),
              .length = static_cast<std::uint32_t>(payload.size()), .frame = Bytes(frame.begin(), frame.end()),
              .reply = reply});
}

}  // namespace smb::transport::verbs
