#include "segment_store.hpp"

#include "protocol/credential.hpp"
#include "protocol/messages.hpp"
#include "transport/server_ops.hpp"
#include "util/parse.hpp"
#include "vector_kernels.hpp"

#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace smb::server {
namespace {
constexpr std::uint64_t kSegmentAlignment = 4096;
}  // namespace

Segment::~Segment() {
  registration.reset();  // unregister before the memory goes back
  if (allocator != nullptr) allocator->release(pool_offset, reserved);
}

SegmentStore::SegmentStore(MemoryPool& pool, transport::ServerTransport& transport, const SessionQuotas& quotas)
    : pool_(pool),
      transport_(transport),
      allocator_(pool.size(), kSegmentAlignment),
      pool_registration_(transport.register_pool(pool.base(), pool.size())),
      quotas_(quotas) {}

transport::SegmentDescriptor SegmentStore::describe(const Segment& s) const {
  return {s.id, reinterpret_cast<std::uint64_t>(s.base), s.length, s.registration->remote_key()};
}

// A new buffer reads as zeros, never as a destroyed buffer's data. Only the
// parts an earlier buffer held need zeroing: the rest of the pool has never
// been handed out and holds the kernel's zeros, and is only faulted in (as
// the populator would). Rewriting it cost a repair onto a fresh server a
// third of its time (85 MiB zeroed per copy, before any byte was pulled).
// Outside the registry's mutex, so that a large buffer does not hold up the
// data path's lookups.
void SegmentStore::clear(const SegmentAllocator::Allocation& taken) {
  const MemoryPool::Foreground foreground(pool_);  // the populator waits meanwhile
  std::uint64_t at = taken.offset;
  const auto fault_in_up_to = [&](std::uint64_t end) {
    // What the populator has faulted in is in place already, and faulting
    // it in again still walks each 4 KiB page: 4-7 ms per 85 MiB, a tenth
    // of a repair over TCP (docs/reliability.md).
    const auto from = std::max(at, pool_.populated());
    if (end > from) MemoryPool::fault_in(pool_.base() + from, end - from);  // else they fault in as used
  };
  for (const auto& held : taken.held_before) {
    fault_in_up_to(held.offset);
    std::memset(pool_.base() + held.offset, 0, held.length);
    at = held.offset + held.length;
  }
  fault_in_up_to(taken.offset + taken.reserved);
}

transport::SegmentDescriptor SegmentStore::alloc_segment(SessionId session, const std::string& name,
                                                     std::uint64_t length) {
  protocol::validate_segment_name(name);
  if (length == 0) throw Error(Errc::invalid_argument, "segment length must be greater than zero");
  auto check = [&] {
    if (by_name_.contains(name))
      throw Error(Errc::already_exists, "buffer '" + name + "' already has a segment here");
    if (const auto held = handle_counts_[session]; held >= quotas_.segments)
      over_quota("segment handles", held, "--max-segments-per-client");
  };
  {
    std::lock_guard lock(mutex_);
    check();
  }
  const auto taken = allocator_.take(length);
  if (!taken)
    throw Error(Errc::no_space, "not enough free memory for " + util::format_bytes(length) + " of buffer '" +
                                    name + "' (largest free range " +
                                    util::format_bytes(allocator_.largest_free()) +
                                    "): free some (`smbctl ls` lists the buffers, `smbctl rm NAME` removes one), "
                                    "start smbd with a larger --capacity, or stripe over more servers");
  auto segment = std::make_shared<Segment>();
  segment->name = name;
  segment->pool_offset = taken->offset;
  segment->reserved = taken->reserved;
  segment->length = length;
  segment->base = pool_.base() + taken->offset;
  segment->allocator = &allocator_;  // from here on, ~Segment returns the range
  clear(*taken);
  // The whole reserved range: page aligned, as transports that map memory need.
  segment->registration = transport_.register_memory(segment->base, taken->reserved);
  std::lock_guard lock(mutex_);
  check();  // again: another session may have taken the name meanwhile
  segment->id = next_segment_id_++;
  by_name_[name] = segment;
  by_id_[segment->id] = segment;
  add_handle(session, *segment);
  spdlog::debug("segment {} for '{}': {} at pool offset {}", segment->id, name, util::format_bytes(length), taken->offset);
  return describe(*segment);
}

transport::SegmentDescriptor SegmentStore::open_segment(SessionId session, const std::string& name) {
  std::lock_guard lock(mutex_);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) throw Error(Errc::not_found, "no segment of buffer '" + name + "' here");
  if (const auto held = handle_counts_[session]; held >= quotas_.segments)
    over_quota("segment handles", held, "--max-segments-per-client");
  add_handle(session, *it->second);
  return describe(*it->second);
}

void SegmentStore::add_handle(SessionId session, Segment& segment) {
  segment.open_handles += 1;
  segment.opens += 1;
  handles_[session][segment.id] += 1;
  handle_counts_[session] += 1;
}

void SegmentStore::close_segment(SessionId session, const std::string& name) {
  std::lock_guard lock(mutex_);
  auto& mine = handles_[session];
  // The live segment of that name first; else one destroyed while open.
  if (auto live = by_name_.find(name); live != by_name_.end() && mine.contains(live->second->id))
    return release_handle(session, live->second->id);
  for (const auto& [id, count] : mine) {
    auto seg = by_id_.find(id);
    if (seg != by_id_.end() && seg->second->name == name && seg->second->unlinked) return release_handle(session, id);
  }
  throw Error(Errc::not_found, "this client holds no handle on buffer '" + name + "'");
}

void SegmentStore::release_handle(SessionId session, std::uint64_t segment_id) {
  auto& mine = handles_[session];
  if (--mine[segment_id] == 0) mine.erase(segment_id);
  if (auto count = handle_counts_.find(session); count != handle_counts_.end() && count->second > 0) count->second -= 1;
  auto it = by_id_.find(segment_id);
  if (it == by_id_.end()) return;
  auto& segment = *it->second;
  segment.open_handles -= 1;
  if (segment.unlinked && segment.open_handles == 0) by_id_.erase(it);  // memory returns
}

bool SegmentStore::unlink(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return false;
  it->second->unlinked = true;
  if (it->second->open_handles == 0) by_id_.erase(it->second->id);
  by_name_.erase(it);
  return true;
}

std::vector<std::uint8_t> SegmentStore::digest(const std::string& name, std::uint64_t offset, std::uint64_t length,
                                           std::uint64_t chunk) const {
  const auto segment = find(name);  // keeps its memory while we read it
  if (chunk == 0 || offset > segment->length || length > segment->length - offset)
    throw Error(Errc::invalid_argument, "digest of '" + name + "': " + std::to_string(length) + " bytes at offset " +
                                            std::to_string(offset) + " in chunks of " + std::to_string(chunk) +
                                            " do not fit its " + std::to_string(segment->length) + " bytes");
  std::vector<std::uint8_t> out;
  out.reserve((length + chunk - 1) / chunk * 16);
  for (std::uint64_t at = 0; at < length; at += chunk) {
    const auto hash = XXH3_128bits(segment->base + offset + at, std::min(chunk, length - at));
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, hash);
    out.insert(out.end(), canonical.digest, canonical.digest + sizeof(canonical.digest));
  }
  return out;
}

void SegmentStore::set_version(const std::string& name, std::uint64_t version) {
  const auto segment = find(name);
  std::lock_guard op(segment->op_mutex);
  segment->begun = version;
  segment->version = version;
  segment->behind = false;
}

void SegmentStore::fell_behind(const std::string& name) { find(name)->behind = true; }

bool SegmentStore::is_behind(const std::string& name) const { return find(name)->behind; }

SegmentStore::SegmentUsers SegmentStore::segment_users(const std::string& name) const {
  const auto segment = find(name);
  std::lock_guard lock(mutex_);
  SegmentUsers out{{}, segment->opens};
  for (const auto& [session, held] : handles_)
    if (held.contains(segment->id)) out.sessions.push_back(session);
  return out;
}

void SegmentStore::session_closed(SessionId session) {
  std::lock_guard lock(mutex_);
  auto handles = handles_.find(session);
  if (handles != handles_.end()) {
    auto mine = handles->second;  // copy: release_handle edits the map
    for (const auto& [id, count] : mine)
      for (std::uint32_t i = 0; i < count; ++i) release_handle(session, id);
    handles_.erase(session);
  }
  handle_counts_.erase(session);
}

std::shared_ptr<Segment> SegmentStore::find(const std::string& name) const {
  std::lock_guard lock(mutex_);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) throw Error(Errc::not_found, "no segment of buffer '" + name + "' here");
  return it->second;
}

std::uint64_t SegmentStore::version(const std::string& name) const { return find(name)->version.load(); }

// `begun` is read first: every op begun by then has ended once `version`
// reaches it. An op that begins between the two reads is later than this
// answer, and whoever compares versions sees it advance the version later.
SegmentStore::SettledVersion SegmentStore::settled_version(const std::string& name) const {
  const auto segment = find(name);
  const std::uint64_t begun = segment->begun.load();
  const std::uint64_t now = segment->version.load();
  return {now, std::max(now, begun)};
}

namespace {
// An atomic's word, checked like a vector op's range (and 8-byte aligned:
// std::atomic_ref needs it).
void check_word(const VectorRequest& r, const Segment& target) {
  const auto what = [&r] {
    return std::string(r.atomic->kind == protocol::AtomicKind::fetch_add ? "fetch-add" : "compare-swap") +
           " on buffer '" + r.name + "'";
  };
  if (r.offset % sizeof(std::uint64_t) != 0)
    throw Error(Errc::invalid_argument, what() + ": offset " + std::to_string(r.offset) + " is not 8-byte aligned");
  if (r.offset > target.length || sizeof(std::uint64_t) > target.length - r.offset)
    throw Error(Errc::out_of_range, what() + ": offset " + std::to_string(r.offset) +
                                        " leaves no 8-byte word in this server's share of " +
                                        std::to_string(target.length) + " bytes");
}

// The same atomic a transport's server-assisted ops run (transport/server_ops.hpp).
std::uint64_t apply_atomic(const VectorRequest::Atomic& op, std::uint64_t offset, std::byte* base) {
  const bool add = op.kind == protocol::AtomicKind::fetch_add;
  const transport::AtomicRequest request{0, offset,
                                         static_cast<std::uint32_t>(add ? transport::AtomicOp::fetch_add
                                                                        : transport::AtomicOp::compare_swap),
                                         add ? op.operand : op.desired, add ? 0 : op.operand};
  return transport::apply_atomic(request, transport::SegmentAccess{nullptr, base, 0});
}
}  // namespace

std::optional<Applied> SegmentStore::apply(const VectorRequest& r, bool wait) {
  // Built only for an error: this runs for every small op.
  const auto what = [&r] {
    return std::string(r.atomic ? "atomic" : vector_op_name(r.op)) + " on buffer '" + r.name + "'";
  };
  auto target = find(r.name);
  std::shared_ptr<Segment> source;  // keeps the source's memory alive while reading it
  const std::byte* x = nullptr;
  if (r.atomic)
    check_word(r, *target);
  else
    x = check_vector_op(r, *target, source);
  std::unique_lock op_lock(target->op_mutex, std::defer_lock);
  if (wait)
    op_lock.lock();
  else if (!op_lock.try_lock())
    return std::nullopt;
  if (r.order != 0) {
    // A replica's copy of an op: exactly after the op its primary applied before it.
    const auto now = target->version.load();
    const auto check = check_order(now, r.order, target->behind);
    if (check.verdict == OrderVerdict::wait) throw OrderGap{check.wait_for};
    if (check.verdict != OrderVerdict::apply)
      throw Error(Errc::out_of_order, order_refusal(check, what(), r.order, now));
  }
  target->begun.fetch_add(1);
  Applied applied;
  try {
    if (r.atomic)
      applied.old = apply_atomic(*r.atomic, r.offset, target->base);
    else
      apply_vector_op(r.op, r.type, target->base + r.offset, x, r.count, r.alpha);
  } catch (...) {
    target->version.fetch_add(1);  // it may have changed part of the memory: it ends all the same
    throw;
  }
  applied.version = target->version.fetch_add(1) + 1;
  return applied;
}

// Checks a vector op against its target (and source) before it touches memory; returns x.
const std::byte* SegmentStore::check_vector_op(const VectorRequest& r, const Segment& target,
                                           std::shared_ptr<Segment>& source) const {
  const auto what = [&r] { return std::string(vector_op_name(r.op)) + " on buffer '" + r.name + "'"; };
  const std::uint64_t esize = element_size(r.type);
  if (esize == 0) throw Error(Errc::invalid_argument, what() + ": unknown element type");
  if (r.count == 0) throw Error(Errc::invalid_argument, what() + ": count must be greater than zero");
  // Before the op mutex: a refused op changes nothing.
  if (!alpha_allowed(r.op, r.type, r.alpha)) check_alpha(r.op, r.type, r.alpha, what());
  // Both offsets: the kernels load and store whole elements (a misaligned
  // double is undefined behaviour; found by fuzz_requests).
  for (const auto& [label, at] : {std::pair{"offset", r.offset}, std::pair{"source offset", r.source_offset}})
    if (at % esize != 0)
      throw Error(Errc::invalid_argument, what() + ": " + label + " " + std::to_string(at) + " is not a multiple of the " +
                                              std::to_string(esize) + "-byte element size");
  if (r.count > UINT64_MAX / esize) throw Error(Errc::out_of_range, what() + ": count is too large");
  const std::uint64_t bytes = r.count * esize;
  if (r.offset > target.length || bytes > target.length - r.offset)
    throw Error(Errc::out_of_range, what() + ": " + std::to_string(bytes) + " bytes at offset " +
                                        std::to_string(r.offset) + " exceed this server's share of " +
                                        std::to_string(target.length) + " bytes");
  if (!needs_source(r.op)) return nullptr;
  if (!r.source) {
    if (r.data.size() != bytes)
      throw Error(Errc::invalid_argument, what() + ": " + std::to_string(r.data.size()) + " bytes of data sent for " +
                                              std::to_string(bytes));
    return reinterpret_cast<const std::byte*>(r.data.data());
  }
  source = find(*r.source);
  if (r.source_offset > source->length || bytes > source->length - r.source_offset)
    throw Error(Errc::out_of_range, what() + ": source '" + *r.source + "' has no " + std::to_string(bytes) +
                                        " bytes at offset " + std::to_string(r.source_offset) + " here");
  const std::byte* x = source->base + r.source_offset;
  const std::byte* y = target.base + r.offset;
  if (x != y && x < y + bytes && y < x + bytes)
    throw Error(Errc::invalid_argument, what() + ": source and target overlap partially");
  return x;
}

std::optional<transport::SegmentAccess> SegmentStore::resolve(std::uint64_t segment_id, std::string_view scope) const {
  std::lock_guard lock(mutex_);
  auto it = by_id_.find(segment_id);
  // Outside a credential's scope a segment is as absent as one never made:
  // ids are small numbers anyone could try.
  if (it == by_id_.end() || !protocol::in_scope(it->second->name, scope)) return std::nullopt;
  return transport::SegmentAccess{it->second, it->second->base, it->second->length};
}

transport::SegmentAccess SegmentStore::access(const std::string& name) const {
  const auto segment = find(name);
  return transport::SegmentAccess{segment, segment->base, segment->length};
}

ServerStats SegmentStore::stats() const {
  std::lock_guard lock(mutex_);
  ServerStats s;
  s.capacity = allocator_.capacity();
  s.used = allocator_.used();
  s.largest_free = allocator_.largest_free();
  s.huge_pages = pool_.huge_pages();
  s.populated = std::min(pool_.populated(), s.capacity);
  s.buffer_count = by_name_.size();
  return s;
}

Page<BufferSummary> SegmentStore::buffers(const std::string& after, std::size_t limit, std::string_view scope) const {
  std::lock_guard lock(mutex_);
  return page_of<BufferSummary>(
      by_name_, after, limit, [scope](const std::shared_ptr<Segment>& s) { return protocol::in_scope(s->name, scope); },
      [](const std::shared_ptr<Segment>& s) { return BufferSummary{s->name, s->length, s->open_handles}; });
}

}  // namespace smb::server
