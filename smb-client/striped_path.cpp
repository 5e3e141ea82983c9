#include "striped_path.hpp"

#include "server_calls.hpp"

namespace smb::client {

// One piece, on one server: most small ops. Over shared memory the op is
// often complete when the transport returns; then no request state is made at
// all (a shared finished one stands in), else `completion` gets one to wait
// with, as start() would have made.
template <class Issue>
Request StripedPath::one_piece(const char* op, std::uint64_t offset, std::uint64_t length,
                               const protocol::StripePiece& piece, transport::CompletionPtr completion, Issue issue) {
  auto* link = buffer_.link_at(piece.server);
  link->check_alive();
  completion->expect();
  issue(*link->channel, *buffer_.segment(0, piece.server), completion);
  if (completion->done() && !completion->failed()) return Request(detail::BufferCore::finished_state());
  auto state = buffer_.new_state(op, offset, length);
  state->completion = std::move(completion);
  state->links.push_back(link);
  return Request(state);
}

template <class IssuePiece>
Request StripedPath::transfer(const char* op, std::uint64_t offset, std::uint64_t length, IssuePiece issue) {
  const auto split = buffer_.pieces(offset, length);
  if (split.size() == 1)
    return one_piece(op, offset, length, split.front(), std::make_shared<transport::Completion>(),
                     [&](transport::Channel& channel, transport::RemoteSegment& segment, const auto& completion) {
                       issue(channel, segment, split.front(), completion);
                     });
  auto state = buffer_.start(op, offset, length, split);
  for (const auto& p : split)
    issue(*buffer_.link_at(p.server)->channel, *buffer_.segment(0, p.server), p, state->completion);
  return Request(state);
}

Request StripedPath::write(std::uint64_t offset, std::span<const std::byte> data) {
  return transfer("write", offset, data.size(),
                  [&](transport::Channel& channel, transport::RemoteSegment& segment, const protocol::StripePiece& p,
                      const transport::CompletionPtr& completion) {
                    channel.put(segment, p.local_offset, data.data() + p.request_offset, p.length, completion);
                  });
}

Request StripedPath::read(std::uint64_t offset, std::span<std::byte> out) {
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

// One-sided: stripe units are multiples of 8, so an aligned word never
// straddles servers.
std::uint64_t StripedPath::atomic(protocol::AtomicKind kind, std::uint64_t offset, std::uint64_t operand,
                                  std::uint64_t desired) {
  const bool compare_swap = kind == protocol::AtomicKind::compare_swap;
  const auto piece = protocol::locate(buffer_.geometry(), offset);
  auto& spare = spare_atomic_word();
  AtomicWord& word = *spare.word;
  auto* link = buffer_.link_at(piece.server);
  link->check_alive();
  word.completion.expect();
  auto& remote = *buffer_.segment(0, piece.server);
  if (compare_swap)
    link->channel->compare_swap(remote, piece.local_offset, operand, desired, &word.old, spare.completion);
  else
    link->channel->fetch_add(remote, piece.local_offset, operand, &word.old, spare.completion);
  // On shared memory or a NIC with native atomics the op is usually done here.
  if (!word.completion.done() || word.completion.failed()) {
    auto state = buffer_.new_state(compare_swap ? "compare-swap" : "fetch-add", offset, sizeof(std::uint64_t));
    state->completion = spare.completion;  // the request (and the transport) keep the word alive
    state->links.push_back(link);
    Request(state).wait();
  }
  return word.old;
}

// Within one stripe (one server), where its transport maps the segment.
std::byte* StripedPath::mapped(std::uint64_t offset, std::uint64_t length) {
  const auto piece = protocol::locate(buffer_.geometry(), offset);
  auto* segment = buffer_.segment(0, piece.server);
  return length <= piece.length && segment != nullptr ? segment->mapped(piece.local_offset, length) : nullptr;
}

// Each part's calls to its one server, all at once.
void StripedPath::apply(const VectorCallArgs& args, const VectorParts& parts, const Describe& what) {
  ServerCalls calls(buffer_.client_, what);
  for (const auto& [position, part] : parts) buffer_.add_vector_calls(calls, args, position, part, 0, nullptr);
  calls.finish_versions();
}

}  // namespace smb::client
