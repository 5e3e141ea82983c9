// The data path of a buffer: split a request along stripes and issue one
// transport op per piece, all servers in parallel.
#include "client_core.hpp"

#include "protocol/messages.hpp"
#include "protocol/striping.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace smb {

BufferCore::BufferCore(std::shared_ptr<ClientCore> client, Layout layout,
                       std::vector<std::unique_ptr<transport::RemoteSegment>> segments)
    : client_(std::move(client)),
      layout_(std::move(layout)),
      name_(std::make_shared<const std::string>(layout_.name)),
      segments_(std::make_unique<std::atomic<transport::RemoteSegment*>[]>(segments.size())),
      links_(std::make_unique<std::atomic<client::ServerLink*>[]>(layout_.servers.size())),
      owned_segments_(std::move(segments)),
      losses_seen_(layout_.servers.size(), true) {  // the record was just read
  for (std::uint32_t r = 0; r < layout_.replicas; ++r) segment_names_.push_back(protocol::segment_name(layout_.name, r));
  for (std::size_t i = 0; i < owned_segments_.size(); ++i) segments_[i] = owned_segments_[i].get();
  for (const auto& copy : layout_.stale) stale_.insert({copy.replica, copy.server});
  for (std::uint32_t i = 0; i < server_count(); ++i) {
    try {
      links_[i] = &client_->link(layout_.servers[i]);
    } catch (const Error& e) {
      // A replicated buffer goes on without a server; its copies elsewhere serve.
      if (layout_.replicas == 1 || !client::is_absence(e)) throw;
    }
  }
}

BufferCore::~BufferCore() {
  try {
    close();
  } catch (const Error&) {
    // A server that is gone has already dropped our handles with the session.
  }
}

std::string client::describe_buffer_op(const std::string& buffer, const char* op, std::uint64_t offset, std::uint64_t length) {
  return "buffer '" + buffer + "': " + op + " of " + std::to_string(length) + " bytes at offset " +
         std::to_string(offset);
}

std::string Request::State::describe() const {
  return buffer_op ? client::describe_buffer_op(*buffer_op->buffer, buffer_op->op, buffer_op->offset, buffer_op->length)
         : what  ? what()
                 : std::string("request");
}

std::string BufferCore::describe(const char* op, std::uint64_t offset, std::uint64_t length) const {
  return client::describe_buffer_op(layout_.name, op, offset, length);
}

void BufferCore::check_range(const char* op, std::uint64_t offset, std::uint64_t length) const {
  if (offset > layout_.size || length > layout_.size - offset)
    throw Error(Errc::out_of_range,
                describe(op, offset, length) + " is out of range (buffer size " + std::to_string(layout_.size) + ")");
}

protocol::StripeGeometry BufferCore::geometry() const {
  return {layout_.size, layout_.stripe_unit, static_cast<std::uint32_t>(layout_.servers.size())};
}

std::vector<protocol::StripePiece> BufferCore::pieces(std::uint64_t offset, std::uint64_t length) const {
  // Within one stripe (every small op): one piece, without splitting.
  if (length != 0) {
    auto piece = protocol::locate(geometry(), offset);
    if (piece.length >= length) {
      piece.length = length;
      return {piece};
    }
  }
  return protocol::split_range(geometry(), offset, length);
}

std::shared_ptr<Request::State> BufferCore::new_state(const char* op, std::uint64_t offset,
                                                      std::uint64_t length) const {
  auto state = std::make_shared<Request::State>();
  state->client = client_;
  state->buffer_op = Request::State::BufferOp{name_, op, offset, length};
  return state;
}

std::shared_ptr<Request::State> BufferCore::start(const char* op, std::uint64_t offset, std::uint64_t length,
                                                  std::span<const protocol::StripePiece> pieces) {
  auto state = new_state(op, offset, length);
  for (const auto& p : pieces) {
    auto* link = link_at(p.server);
    if (std::find(state->links.begin(), state->links.end(), link) != state->links.end()) continue;
    link->check_alive();
    state->links.push_back(link);
  }
  state->completion->expect(static_cast<int>(pieces.size()));
  return state;
}

// One piece, on one server: most small ops. Over shared memory the op is
// often complete when the transport returns; then no request state is made at
// all (a shared finished one stands in), else `completion` gets one to wait
// with, as start() would have made.
template <class Issue>
Request BufferCore::one_piece(const char* op, std::uint64_t offset, std::uint64_t length,
                              const protocol::StripePiece& piece, transport::CompletionPtr completion, Issue issue) {
  auto* link = link_at(piece.server);
  link->check_alive();
  completion->expect();
  issue(*link->channel, *segment(0, piece.server), completion);
  if (completion->done() && !completion->failed()) return Request(finished_state());
  auto state = new_state(op, offset, length);
  state->completion = std::move(completion);
  state->links.push_back(link);
  return Request(state);
}

const std::shared_ptr<Request::State>& BufferCore::finished_state() {
  static const auto finished = std::make_shared<Request::State>();  // its completion expects nothing: done
  return finished;
}

// Writes and reads: one transport op per piece, every server at once.
template <class IssuePiece>
Request BufferCore::transfer(const char* op, std::uint64_t offset, std::uint64_t length, IssuePiece issue) {
  check_range(op, offset, length);
  const auto split = pieces(offset, length);
  if (split.size() == 1)
    return one_piece(op, offset, length, split.front(), std::make_shared<transport::Completion>(),
                     [&](transport::Channel& channel, transport::RemoteSegment& segment, const auto& completion) {
                       issue(channel, segment, split.front(), completion);
                     });
  auto state = start(op, offset, length, split);
  for (const auto& p : split) issue(*link_at(p.server)->channel, *segment(0, p.server), p, state->completion);
  return Request(state);
}

Request BufferCore::write(std::uint64_t offset, std::span<const std::byte> data) {
  if (replicas() > 1) return write_replicated(offset, data);
  return transfer("write", offset, data.size(),
                  [&](transport::Channel& channel, transport::RemoteSegment& segment, const protocol::StripePiece& p,
                      const transport::CompletionPtr& completion) {
                    channel.put(segment, p.local_offset, data.data() + p.request_offset, p.length, completion);
                  });
}

Request BufferCore::read(std::uint64_t offset, std::span<std::byte> out) {
  if (replicas() > 1) return read_replicated(offset, out);
  return transfer("read", offset, out.size(),
                  [&](transport::Channel& channel, transport::RemoteSegment& segment, const protocol::StripePiece& p,
                      const transport::CompletionPtr& completion) {
                    channel.get(segment, p.local_offset, out.data() + p.request_offset, p.length, completion);
                  });
}

namespace {
// Where an atomic's old value lands, beside its completion: both live as long
// as the transport holds the op, even if the caller's wait gives up on it.
struct AtomicWord {
  transport::Completion completion;
  std::uint64_t old = 0;
};

// This thread's word for its next atomic: the last one again when nobody
// else holds it any more (an op that timed out may still be held by the
// transport), so that an atomic allocates nothing and counts no references
// (`completion` aliases `word`: two owners at rest).
struct SpareAtomicWord {
  std::shared_ptr<AtomicWord> word;
  transport::CompletionPtr completion;
};
SpareAtomicWord& spare_atomic_word() {
  thread_local SpareAtomicWord spare;
  if (!spare.word || spare.word.use_count() != 2 || !spare.word->completion.done() ||
      spare.word->completion.failed()) {
    spare.word = std::make_shared<AtomicWord>();
    spare.completion = transport::CompletionPtr(spare.word, &spare.word->completion);
  }
  return spare;
}
}  // namespace

std::uint64_t BufferCore::atomic(bool compare_swap, std::uint64_t offset, std::uint64_t a, std::uint64_t b) {
  const char* op = compare_swap ? "compare-swap" : "fetch-add";
  check_range(op, offset, sizeof(std::uint64_t));
  if (offset % sizeof(std::uint64_t) != 0)
    throw Error(Errc::invalid_argument, describe(op, offset, 8) + ": offset must be 8-byte aligned");
  // A replicated buffer's copies must take racing atomics in one order: they
  // run on the servers, ordered like vector ops (ordered_ops.cpp).
  if (replicas() > 1)
    return atomic_replicated(compare_swap ? protocol::AtomicKind::compare_swap : protocol::AtomicKind::fetch_add,
                             offset, a, b);
  // Stripe units are multiples of 8, so an aligned word never straddles servers.
  const auto piece = protocol::locate(geometry(), offset);
  auto& spare = spare_atomic_word();
  AtomicWord& word = *spare.word;
  auto* link = link_at(piece.server);
  link->check_alive();
  word.completion.expect();
  auto& remote = *segment(0, piece.server);
  if (compare_swap)
    link->channel->compare_swap(remote, piece.local_offset, a, b, &word.old, spare.completion);
  else
    link->channel->fetch_add(remote, piece.local_offset, a, &word.old, spare.completion);
  // On shared memory or a NIC with native atomics the op is usually done here.
  if (!word.completion.done() || word.completion.failed()) {
    auto state = new_state(op, offset, sizeof(std::uint64_t));
    state->completion = spare.completion;  // the request (and the transport) keep the word alive
    state->links.push_back(link);
    Request(state).wait();
  }
  return word.old;
}

void BufferCore::close() {
  std::call_once(closed_, [this] {
    if (replicas() > 1) client_->release_held(this, layout_.name);
    for (std::uint32_t r = 0; r < replicas(); ++r)
      for (std::uint32_t s = 0; s < server_count(); ++s) {
        auto& held = segments_[std::size_t{r} * server_count() + s];
        if (!held.exchange(nullptr)) continue;
        try {
          link_at(s)->control->call(protocol::MessageType::close_segment, {{"name", segment_names_[r]}});
        } catch (const Error&) {
          // gone servers dropped the handle already; keep closing the others
        }
      }
  });
}

bool BufferCore::usable(std::uint32_t replica, std::uint32_t server) {
  if (segment(replica, server) == nullptr || link_at(server) == nullptr || !link_at(server)->alive()) return false;
  std::lock_guard lock(stale_mutex_);
  return !stale_.contains({replica, server});
}

void BufferCore::mark_stale(std::uint32_t replica, std::uint32_t server, const std::string& why, bool lives) {
  {
    std::lock_guard lock(stale_mutex_);
    if (!stale_.insert({replica, server}).second) return;
  }
  spdlog::warn("buffer '{}': copy {} on server {} is no longer used by this client: {}", layout_.name, replica,
               layout_.servers[server], why);
  // A server that only seemed lost (a timeout, a partition) keeps a copy
  // that missed this op: every client must leave it, not only this one.
  bool recorded = false;
  try {
    recorded = client_->record_stale(layout_.name, {replica, server}, why);
  } catch (const Error& e) {
    if (lives) throw Error(e.code(), "buffer '" + layout_.name + "': its copies diverged: " + e.what());
  }
  if (recorded) return;
  {
    std::lock_guard lock(stale_mutex_);
    unrecorded_.insert({replica, server});
  }
  // Were the op acknowledged now, a later read or repair could choose the
  // copy that lacks it (nobody else knows it is behind): it fails instead.
  if (lives)
    throw Error(Errc::unreachable, "buffer '" + layout_.name + "': copy " + std::to_string(replica) + " on " +
                                       layout_.servers[server] + " missed this op (" + why +
                                       ") while its server may live, and no keeper of the buffer's record could be "
                                       "reached to record it behind: the op is not acknowledged (the other copies "
                                       "may have it)");
}

void BufferCore::learn_stale(const std::vector<CopyRef>& stale) {
  std::lock_guard lock(stale_mutex_);
  for (const auto& copy : stale)
    if (copy.replica < replicas() && copy.server < server_count() && stale_.insert({copy.replica, copy.server}).second)
      spdlog::info("buffer '{}': copy {} on server {} fell behind the others (recorded by another client); no longer used",
                   layout_.name, copy.replica, layout_.servers[copy.server]);
}

void BufferCore::learn_after_losses() {
  bool lost_since = false;
  {
    std::lock_guard lock(stale_mutex_);
    for (std::uint32_t s = 0; s < server_count(); ++s) {
      const bool lost = !alive(s);
      lost_since = lost_since || (lost && !losses_seen_[s]);
      losses_seen_[s] = lost;
    }
  }
  if (!lost_since) return;
  try {
    learn_stale(client_->recorded_stale(layout_.name));
  } catch (const Error& e) {
    spdlog::warn("buffer '{}': after losing a server, its record of stale copies could not be read: {}", layout_.name,
                 e.what());
  }
}

bool BufferCore::takes_changes(std::uint32_t replica, std::uint32_t server, const char* op) {
  if (usable(replica, server)) return true;
  {
    std::lock_guard lock(stale_mutex_);
    if (stale_.contains({replica, server})) return false;  // left already, and said why
  }
  mark_stale(replica, server, std::string("this client cannot reach its server for ") + op, /*lives=*/true);
  return false;
}

std::uint32_t BufferCore::first_taking_changes(std::uint32_t position, const char* op) {
  learn_after_losses();
  for (std::uint32_t r = 0; r < replicas(); ++r)
    if (takes_changes(r, replica_server(position, r), op)) return r;
  return first_usable(position, op);  // none: throws, naming where its copies are
}

std::uint32_t BufferCore::first_usable(std::uint32_t position, const char* op) {
  learn_after_losses();
  for (std::uint32_t r = 0; r < replicas(); ++r)
    if (usable(r, replica_server(position, r))) return r;
  std::string where;
  for (std::uint32_t r = 0; r < replicas(); ++r) {
    const auto s = replica_server(position, r);
    bool stale = false;
    {
      std::lock_guard lock(stale_mutex_);
      stale = stale_.contains({r, s});
    }
    where += (r == 0 ? "" : ", ") + layout_.servers[s] + (stale ? " (behind the others)" : "");
  }
  throw Error(Errc::server_gone, "buffer '" + layout_.name + "': " + op + ": every copy of its stripes on " + where +
                                     " is gone or behind the others");
}

}  // namespace smb
