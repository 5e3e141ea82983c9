// Server-side vector ops from the client's side: one request per server
// holding part of the region (a server's stripes of a range are contiguous in
// its segment), sent to all servers at once as calls over their data
// channels. Inline data is gathered per server and sent in chunks of the
// most a call carries; the buffer's data path (data_path.hpp) sends them
// to its one copy, or to every copy in one order.
#include "client_core.hpp"
#include "server_calls.hpp"

#include "protocol/messages.hpp"

#include <algorithm>
#include <map>

namespace smb {

void BufferCore::apply(VectorOp op, DType type, std::uint64_t offset, std::uint64_t count, double alpha,
                       std::span<const std::byte> data, const BufferCore* source, std::uint64_t source_offset) {
  const std::uint64_t esize = element_size(type);
  // Built only for an error: small ops are the hot path of training.
  const auto what = [op, type, offset, name = name_] {
    return std::string(vector_op_name(op)) + " (" + dtype_name(type) + ") on buffer '" + *name + "' at offset " +
           std::to_string(offset);
  };
  if (esize == 0) throw Error(Errc::invalid_argument, what() + ": unknown element type");
  if (static_cast<int>(op) < 1 || op > VectorOp::product) throw Error(Errc::invalid_argument, what() + ": unknown op");
  if (count == 0 || count > layout_.size / esize)
    throw Error(Errc::out_of_range, what() + ": " + std::to_string(count) + " elements do not fit the buffer");
  const std::uint64_t bytes = count * esize;
  check_range(vector_op_name(op), offset, bytes);
  if (offset % esize != 0)
    throw Error(Errc::invalid_argument, what() + ": offset is not a multiple of the element size");
  const bool inline_x = needs_source(op) && source == nullptr;
  if (inline_x && data.size() != bytes)
    throw Error(Errc::invalid_argument, what() + ": x has " + std::to_string(data.size()) + " bytes, " +
                                            std::to_string(count) + " elements need " + std::to_string(bytes));
  std::int64_t source_shift = 0;  // source local offset minus target local offset, per server
  if (needs_source(op) && source != nullptr) {
    const auto& sl = source->layout();
    const std::uint64_t period = layout_.stripe_unit * layout_.servers.size();
    if (sl.servers != layout_.servers || sl.stripe_unit != layout_.stripe_unit || sl.replicas != layout_.replicas)
      throw Error(Errc::invalid_argument, what() + ": source buffer '" + sl.name +
                                              "' is not striped like the target (same servers, stripe unit and replicas)");
    if (source_offset > sl.size || bytes > sl.size - source_offset)
      throw Error(Errc::out_of_range, what() + ": source '" + sl.name + "' has no " + std::to_string(bytes) +
                                          " bytes at offset " + std::to_string(source_offset));
    const auto delta = static_cast<std::int64_t>(source_offset) - static_cast<std::int64_t>(offset);
    if (delta % static_cast<std::int64_t>(period) != 0)
      throw Error(Errc::invalid_argument, what() + ": source offset - offset must be a multiple of " +
                                              std::to_string(period) + " (stripe unit x servers)");
    source_shift = delta / static_cast<std::int64_t>(layout_.servers.size());
  }

  client::VectorParts parts;  // by position
  for (const auto& p : pieces(offset, bytes)) {
    auto [it, fresh] = parts.try_emplace(p.server, client::VectorPart{p.local_offset, 0, {}, {}});
    auto& part = it->second;
    part.length += p.length;
    if (!inline_x) continue;
    const auto from = data.subspan(p.request_offset, p.length);
    if (fresh) {
      part.x = from;
      continue;
    }
    if (part.gathered.empty()) part.gathered.assign(part.x.begin(), part.x.end());
    part.gathered.insert(part.gathered.end(), from.begin(), from.end());
    part.x = part.gathered;
  }

  // Copies of one part are split alike, so that their calls pair up (replicas).
  std::uint64_t chunk = UINT64_MAX;
  if (inline_x)
    for (std::uint32_t s = 0; s < server_count(); ++s)
      if (auto* link = link_at(s)) chunk = std::min<std::uint64_t>(chunk, client::ServerCalls::max_payload(*link) / esize * esize);
  const client::VectorCallArgs args{op, type, alpha, chunk, needs_source(op) ? source : nullptr, source_shift};
  path_->apply(args, parts, what);
}

void BufferCore::add_vector_calls(client::ServerCalls& calls, const client::VectorCallArgs& args,
                                  std::uint32_t position, const client::VectorPart& part, std::uint32_t replica,
                                  const std::vector<std::uint64_t>* orders) const {
  auto& link = *link_at(replica_server(position, replica));
  const std::uint64_t esize = element_size(args.type);
  const std::uint64_t chunk = std::min(args.chunk, part.length);
  std::size_t k = 0;
  for (std::uint64_t done = 0; done < part.length; done += chunk, ++k) {
    const std::uint64_t n = std::min(chunk, part.length - done);
    std::span<const std::byte> x;
    std::optional<std::string_view> source_name;
    std::uint64_t source_local = 0;
    if (args.source != nullptr) {
      source_name = args.source->segment_names_[replica];
      source_local = static_cast<std::uint64_t>(static_cast<std::int64_t>(part.local_offset + done) + args.source_shift);
    } else if (!part.x.empty()) {
      x = part.x.subspan(done, n);
    }
    calls.add_vector_call(link, args.op, args.type, part.local_offset + done, n / esize, args.alpha,
                          segment_names_[replica], source_name, source_local, x, orders != nullptr ? orders->at(k) : 0);
  }
}

}  // namespace smb
