// libFuzzer target: the control-frame decoder (header and MessagePack body)
// and the field accessors every handler uses. Anything but smb::Error
// escaping, a crash or a sanitizer report is a finding.
#include "protocol/messages.hpp"

#include <cstdint>
#include <cstdlib>

namespace {
using namespace smb::protocol;

template <class F>
void expect_only_our_errors(F&& f) {
  try {
    f();
  } catch (const smb::Error&) {
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size >= kHeaderSize) {
    expect_only_our_errors([&] {
      const auto header = decode_header(std::span<const std::uint8_t, kHeaderSize>(data, kHeaderSize));
      if (header.body_length > kMaxBodySize) std::abort();  // decode_header must refuse it
    });
  }
  expect_only_our_errors([&] {
    const Body body = decode_body({data, size});
    for (const char* field : {"name", "transport", "length", "offset", "data", "ok", "alpha", "after"}) {
      expect_only_our_errors([&] { (void)get_string(body, field, "fuzz"); });
      expect_only_our_errors([&] { (void)get_name(body, field, "fuzz"); });
      expect_only_our_errors([&] { (void)get_u64(body, field, "fuzz"); });
      expect_only_our_errors([&] { (void)get_binary(body, field, "fuzz"); });
      expect_only_our_errors([&] { (void)get_bool(body, field, "fuzz"); });
      expect_only_our_errors([&] { (void)get_double(body, field, "fuzz"); });
    }
    expect_only_our_errors([&] { throw_if_error(body, "fuzz"); });
    // A decoded body re-encodes into a reply frame (never throwing) that decodes to the same value
    const auto frame = encode_reply(9, 1, body);
    const auto header = decode_header(std::span<const std::uint8_t, kHeaderSize>(frame.data(), kHeaderSize));
    if (header.type != (9 | kReplyBit) || header.body_length != frame.size() - kHeaderSize) std::abort();
    // (compared as bytes: NaN != NaN as values)
    if (size <= kMaxBodySize &&
        Body::to_msgpack(decode_body(std::span<const std::uint8_t>(frame).subspan(kHeaderSize))) != Body::to_msgpack(body))
      std::abort();
  });
  return 0;
}
