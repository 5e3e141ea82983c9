// Registered caller memory (Client::register_memory): writes from it and
// reads into it land exactly as from unregistered memory -- striped across
// servers, in pieces larger than a staging slot, at offsets inside the
// region -- and ops go on working once it is unregistered. Over UCX
// registration changes nothing; in the soft-RoCE VM's native-verbs run
// (SMB_TEST_NATIVE_VERBS) the NIC moves these bytes in place, zero-copy.
#include "data.hpp"
#include "expect_error.hpp"
#include "fabric.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>

#include <algorithm>

namespace {

using namespace smb::test;

class RegisteredMemoryTest : public FabricTest {};

TEST_P(RegisteredMemoryTest, WritesAndReadsThroughRegisteredMemoryMatch) {
  auto client = make_client();
  constexpr std::uint64_t kSize = (3u << 20) + 4096 + 5;  // several stripes and staging slots, odd tail
  auto buffer = client.create("registered", kSize);
  ByteVec source = pattern_bytes(0, kSize, 7);
  ByteVec sink(kSize + 64);  // reads land at an offset inside the region
  {
    auto source_registration = client.register_memory(source);
    auto sink_registration = client.register_memory(sink);
    EXPECT_TRUE(source_registration.valid() && sink_registration.valid());
    buffer.write(0, source);
    std::span<std::byte> inner(sink.data() + 64, kSize);
    buffer.read(0, inner);
    EXPECT_TRUE(same_bytes(source, ByteVec(inner.begin(), inner.end())));
    // Several requests in flight at once, each from its part of the region.
    std::vector<smb::Request> reads;
    for (std::uint64_t part = 0; part < 4; ++part) {
      const std::uint64_t length = kSize / 4, offset = part * length;
      reads.push_back(buffer.read_async(offset, std::span(sink).subspan(offset, length)));
    }
    for (auto& r : reads) r.wait();
    EXPECT_TRUE(same_bytes(ByteVec(source.begin(), source.begin() + kSize / 4 * 4),
                           ByteVec(sink.begin(), sink.begin() + kSize / 4 * 4)));
  }
  // Unregistered again: the same memory still works, through staging.
  ByteVec other = pattern_bytes(0, kSize, 9), back(kSize);
  buffer.write(0, other);
  buffer.read(0, back);
  EXPECT_TRUE(same_bytes(other, back));
  // A client connects to servers on first use: memory registered before that covers the new links too.
  auto fresh = make_client();
  std::fill(back.begin(), back.end(), std::byte{0});
  auto early = fresh.register_memory(back);
  fresh.open("registered").read(0, back);
  EXPECT_TRUE(same_bytes(other, back));
}

TEST_P(RegisteredMemoryTest, AnEmptyRegionIsRefused) {
  auto client = make_client();
  expect_errc(smb::Errc::invalid_argument, [&] { client.register_memory({}); }, "empty span");
}

INSTANTIATE_TEST_SUITE_P(Fabrics, RegisteredMemoryTest, testing::ValuesIn(all_fabrics()), fabric_name);

}  // namespace
