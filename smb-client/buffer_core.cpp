// The data path of a buffer: split a request along stripes and issue one
// transport op per piece, all servers in parallel.
#include "client_core.hpp"

#include "protocol/messages.hpp"
#include "protocol/striping.hpp"

#include <algorithm>

namespace smb {

BufferCore::BufferCore(std::shared_ptr<ClientCore> client, Layout layout,
                       std::vector<std::unique_ptr<transport::RemoteSegment>> segments)
    : client_(std::move(client)), layout_(std::move(layout)), segments_(std::move(segments)) {
  for (const auto& s : layout_.servers) links_.push_back(&client_->link(s));
}

BufferCore::~BufferCore() {
  try {
    close();
  } catch (const Error&) {
    // A server that is gone has already dropped our handles with the session.
  }
}

std::string BufferCore::describe(const char* op, std::uint64_t offset, std::uint64_t length) const {
  return "buffer '" + layout_.name + "': " + op + " of " + std::to_string(length) + " bytes at offset " +
         std::to_string(offset);
}

void BufferCore::check_range(const char* op, std::uint64_t offset, std::uint64_t length) const {
  if (offset > layout_.size || length > layout_.size - offset)
    throw Error(Errc::out_of_range,
                describe(op, offset, length) + " is out of range (buffer size " + std::to_string(layout_.size) + ")");
}

std::vector<protocol::StripePiece> BufferCore::pieces(std::uint64_t offset, std::uint64_t length) const {
  return protocol::split_range(
      {layout_.size, layout_.stripe_unit, static_cast<std::uint32_t>(layout_.servers.size())}, offset, length);
}

std::shared_ptr<Request::State> BufferCore::start(std::string what, const std::vector<protocol::StripePiece>& pieces) {
  auto state = std::make_shared<Request::State>();
  state->client = client_;
  state->completion = std::make_shared<transport::Completion>();
  state->deadline = std::chrono::steady_clock::now() + client_->timeout();
  state->what = std::move(what);
  for (const auto& p : pieces) {
    auto* link = links_[p.server];
    if (std::find(state->links.begin(), state->links.end(), link) != state->links.end()) continue;
    link->check_alive();
    state->links.push_back(link);
  }
  state->completion->expect(static_cast<int>(pieces.size()));
  return state;
}

Request BufferCore::write(std::uint64_t offset, std::span<const std::byte> data) {
  check_range("write", offset, data.size());
  const auto split = pieces(offset, data.size());
  auto state = start(describe("write", offset, data.size()), split);
  for (const auto& p : split)
    links_[p.server]->channel->put(*segments_[p.server], p.local_offset, data.data() + p.request_offset,
                                   p.length, state->completion);
  return Request(state);
}

Request BufferCore::read(std::uint64_t offset, std::span<std::byte> out) {
  check_range("read", offset, out.size());
  const auto split = pieces(offset, out.size());
  auto state = start(describe("read", offset, out.size()), split);
  for (const auto& p : split)
    links_[p.server]->channel->get(*segments_[p.server], p.local_offset, out.data() + p.request_offset,
                                   p.length, state->completion);
  return Request(state);
}

std::uint64_t BufferCore::atomic(bool compare_swap, std::uint64_t offset, std::uint64_t a, std::uint64_t b) {
  const char* op = compare_swap ? "compare-swap" : "fetch-add";
  check_range(op, offset, sizeof(std::uint64_t));
  if (offset % sizeof(std::uint64_t) != 0)
    throw Error(Errc::invalid_argument, describe(op, offset, 8) + ": offset must be 8-byte aligned");
  // Stripe units are multiples of 8, so an aligned word never straddles servers.
  const auto split = pieces(offset, sizeof(std::uint64_t));
  auto state = start(describe(op, offset, 8), split);
  const auto& piece = split.front();
  auto& channel = *links_[piece.server]->channel;
  auto& segment = *segments_[piece.server];
  if (compare_swap)
    channel.compare_swap(segment, piece.local_offset, a, b, &state->result, state->completion);
  else
    channel.fetch_add(segment, piece.local_offset, a, &state->result, state->completion);
  Request request(state);
  request.wait();
  return state->result;
}

void BufferCore::close() {
  std::call_once(closed_, [this] {
    for (std::size_t i = 0; i < layout_.servers.size(); ++i) {
      if (!segments_[i]) continue;
      segments_[i].reset();
      try {
        client_->link(layout_.servers[i]).control->call(protocol::MessageType::close_segment,
                                                        {{"name", layout_.name}});
      } catch (const Error&) {
        // gone servers dropped the handle already; keep closing the others
      }
    }
  });
}

}  // namespace smb
