// Server-side vector ops from the client's side: one request per server
// holding part of the region (a server's stripes of a range are contiguous in
// its segment), sent to all servers at once as calls over their data
// channels. Inline data is gathered per server and sent in chunks of the
// most a call carries.
#include "client_core.hpp"
#include "server_calls.hpp"

#include "protocol/messages.hpp"

#include <map>

namespace smb {

namespace {

struct ServerPart {
  std::uint64_t local_offset = 0;  // first byte of the region in this server's segment
  std::uint64_t length = 0;
  std::span<const std::byte> x;    // inline x, in local order: the caller's bytes when one piece,
  std::vector<std::byte> gathered;  // else gathered here
};

}  // namespace

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
    if (sl.servers != layout_.servers || sl.stripe_unit != layout_.stripe_unit)
      throw Error(Errc::invalid_argument, what() + ": source buffer '" + sl.name +
                                              "' is not striped like the target (same servers and stripe unit)");
    if (source_offset > sl.size || bytes > sl.size - source_offset)
      throw Error(Errc::out_of_range, what() + ": source '" + sl.name + "' has no " + std::to_string(bytes) +
                                          " bytes at offset " + std::to_string(source_offset));
    const auto delta = static_cast<std::int64_t>(source_offset) - static_cast<std::int64_t>(offset);
    if (delta % static_cast<std::int64_t>(period) != 0)
      throw Error(Errc::invalid_argument, what() + ": source offset - offset must be a multiple of " +
                                              std::to_string(period) + " (stripe unit x servers)");
    source_shift = delta / static_cast<std::int64_t>(layout_.servers.size());
  }

  std::map<std::uint32_t, ServerPart> parts;
  for (const auto& p : pieces(offset, bytes)) {
    auto [it, fresh] = parts.try_emplace(p.server, ServerPart{p.local_offset, 0, {}, {}});
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

  client::ServerCalls calls(client_, what);
  for (const auto& [server, part] : parts) {
    auto& link = *links_[server];
    const std::uint64_t chunk = inline_x ? client::ServerCalls::max_payload(link) / esize * esize : part.length;
    for (std::uint64_t done = 0; done < part.length; done += chunk) {
      const std::uint64_t n = std::min(chunk, part.length - done);
      std::span<const std::byte> x;
      std::optional<std::string_view> source_name;
      std::uint64_t source_local = 0;
      if (inline_x) {
        x = part.x.subspan(done, n);
      } else if (needs_source(op)) {
        source_name = source->layout().name;
        source_local = static_cast<std::uint64_t>(static_cast<std::int64_t>(part.local_offset + done) + source_shift);
      }
      calls.add_vector_call(link, op, type, part.local_offset + done, n / esize, alpha, layout_.name, source_name,
                            source_local, x);
    }
  }
  calls.finish_versions();
}

}  // namespace smb
