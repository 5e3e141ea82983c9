// libFuzzer target: the data channel's headers, as smbd's transports check
// them before touching memory: UCX "am" write/read/atomic headers and tcp
// request headers against a segment table, and call messages (UCX and
// verbs) split into frame and payload. The checked ops then really run on the segment's memory, so an
// out-of-bounds access that a check let through is an ASan report.
#include "transport/call_wire.hpp"
#include "transport/tcp/tcp_wire.hpp"
#include "transport/ucx/am_checks.hpp"
#include "transport/verbs/verbs_calls.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace {

using namespace smb::transport;
using namespace smb::transport::ucx;

// Three segments over one heap block, as a pool would hold them: ids 1-3.
struct Segments {
  std::vector<std::byte> memory = std::vector<std::byte>(64 * 1024);
  SegmentResolver resolver = [this](std::uint64_t id, std::string_view) -> std::optional<SegmentAccess> {
    static constexpr std::uint64_t starts[] = {0, 0, 4096, 8192};
    static constexpr std::uint64_t lengths[] = {0, 4096, 4096, 56 * 1024};
    if (id == 0 || id > 3) return std::nullopt;
    return SegmentAccess{nullptr, memory.data() + starts[id], lengths[id]};
  };
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Segments segments;
  if (size < 2) return 0;
  const std::uint8_t kind = data[0] % 5;
  const std::size_t header_length = data[1];  // what the peer claims; the checks must not trust it
  data += 2;
  size -= 2;
  const std::size_t claimed = std::min(header_length, size);
  SegmentAccess access;
  switch (kind) {
    case 0: {  // write or read
      const auto h = read_header<AmRequestHeader>(data, claimed);
      if (!h || check_request(segments.resolver, {}, *h, access) != smb::Errc::ok || h->length == 0) break;
      std::vector<std::byte> staging(h->length);
      std::memcpy(staging.data(), access.base + h->offset, h->length);
      std::memcpy(access.base + h->offset, staging.data(), h->length);
      break;
    }
    case 1: {  // atomic
      const auto h = read_header<AmAtomicHeader>(data, claimed);
      if (h && check_atomic(segments.resolver, {}, atomic_request(*h), access) == smb::Errc::ok)
        (void)apply_atomic(atomic_request(*h), access);
      break;
    }
    case 2: {  // a UCX call: header, then frame + payload as the message's data
      const auto h = read_header<CallHeader>(data, claimed);
      if (!h) break;
      const auto parts = split_call({data + claimed, size - claimed}, h->frame_length);
      if (parts && parts->frame.size() + parts->payload.size() != size - claimed) std::abort();
      break;
    }
    case 3: {  // a verbs call: one message, header first
      if (size < sizeof(CallHeader) || size > verbs::kCallMessage) break;
      CallHeader h{};
      std::memcpy(&h, data, sizeof h);
      const auto parts = split_call({data + sizeof h, size - sizeof h}, h.frame_length);
      if (parts && parts->frame.size() != h.frame_length) std::abort();
      break;
    }
    case 4: {  // a tcp request header: what check_request lets through runs on the memory
      const auto h = read_header<tcp::RequestHeader>(data, claimed);
      if (!h) break;
      const auto check = tcp::check_request(segments.resolver, {}, *h, access);
      if (check.error != smb::Errc::ok) {
        if (check.drain != 0 && check.drain != h->length) std::abort();  // drains what the put carries
        break;
      }
      const auto what = static_cast<tcp::Kind>(h->kind);
      if (what == tcp::Kind::atomic) {
        (void)apply_atomic(tcp::atomic_request(*h), access);
      } else if ((what == tcp::Kind::put || what == tcp::Kind::get) && h->length != 0) {
        std::vector<std::byte> staging(h->length);
        std::memcpy(staging.data(), access.base + h->offset, h->length);
        std::memcpy(access.base + h->offset, staging.data(), h->length);
      } else if (what == tcp::Kind::call) {
        if (h->frame_length > tcp::kMaxCallFrame || h->length > tcp::kMaxCallPayload) std::abort();
      } else if (what != tcp::Kind::put && what != tcp::Kind::get) {
        std::abort();  // an unknown kind was let through
      }
      break;
    }
  }
  return 0;
}
