// A buffer: its segments and links, the checks every request passes, and
// the request plumbing its data path (data_path.hpp) builds on. Which data
// path it has -- striped or replicated -- is chosen here, once.
#include "client_core.hpp"
#include "replicated_path.hpp"
#include "striped_path.hpp"

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
      owned_segments_(std::move(segments)) {
  // The one place that asks how many copies the buffer has.
  const bool replicated = layout_.replicas > 1;
  for (std::uint32_t r = 0; r < layout_.replicas; ++r) segment_names_.push_back(protocol::segment_name(layout_.name, r));
  for (std::size_t i = 0; i < owned_segments_.size(); ++i) segments_[i] = owned_segments_[i].get();
  for (std::uint32_t i = 0; i < server_count(); ++i) {
    try {
      links_[i] = &client_->link(layout_.servers[i]);
    } catch (const Error& e) {
      // A replicated buffer goes on without a server; its copies elsewhere serve.
      if (!replicated || !client::is_absence(e)) throw;
    }
  }
  if (replicated)
    path_ = std::make_unique<client::ReplicatedPath>(*this);
  else
    path_ = std::make_unique<client::StripedPath>(*this);
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

const std::shared_ptr<Request::State>& BufferCore::finished_state() {
  static const auto finished = std::make_shared<Request::State>();  // its completion expects nothing: done
  return finished;
}

Request BufferCore::write(std::uint64_t offset, std::span<const std::byte> data) {
  check_range("write", offset, data.size());
  return path_->write(offset, data);
}

Request BufferCore::read(std::uint64_t offset, std::span<std::byte> out) {
  check_range("read", offset, out.size());
  return path_->read(offset, out);
}

std::uint64_t BufferCore::atomic(bool compare_swap, std::uint64_t offset, std::uint64_t a, std::uint64_t b) {
  const char* op = compare_swap ? "compare-swap" : "fetch-add";
  check_range(op, offset, sizeof(std::uint64_t));
  if (offset % sizeof(std::uint64_t) != 0)
    throw Error(Errc::invalid_argument, describe(op, offset, 8) + ": offset must be 8-byte aligned");
  return path_->atomic(compare_swap ? protocol::AtomicKind::compare_swap : protocol::AtomicKind::fetch_add, offset,
                       a, b);
}

std::byte* BufferCore::mapping(std::uint64_t offset, std::uint64_t length) {
  check_range("mapping", offset, length);
  return path_->mapped(offset, length);
}

std::shared_ptr<Request::State> BufferCore::new_state_on(const char* op, std::uint64_t offset, std::uint64_t length,
                                                         std::uint32_t server) const {
  auto state = new_state(op, offset, length);
  state->links.push_back(link_at(server));
  return state;
}

void BufferCore::close() {
  std::call_once(closed_, [this] {
    path_->close();
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

}  // namespace smb
