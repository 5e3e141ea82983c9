// Striped data path: writes and reads of odd sizes at odd offsets, crossing
// stripe and server boundaries, must land exactly where a local model of the
// buffer says, and be visible to other clients once they complete.
#include "data.hpp"
#include "fabric.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <span>

namespace {

using namespace smb::test;

struct Case {
  std::uint64_t offset, length;
};

// Writes each case's bytes (a new salt each) through `writer`, mirrors them
// in `model`, and checks that `reader` reads them back.
void write_and_check(smb::Buffer& writer, smb::Buffer& reader, ByteVec& model, const std::vector<Case>& cases) {
  std::uint8_t salt = 1;
  for (const auto& c : cases) {
    SCOPED_TRACE("offset " + std::to_string(c.offset) + ", length " + std::to_string(c.length));
    const auto data = pattern_bytes(c.offset, c.length, salt++);
    writer.write(c.offset, data);
    std::copy(data.begin(), data.end(), model.begin() + static_cast<std::ptrdiff_t>(c.offset));
    ByteVec got(c.length);
    reader.read(c.offset, got);
    ASSERT_TRUE(same_bytes(data, got, c.offset));
  }
}

class StripedIoTest : public FabricTest {
 protected:
  static constexpr std::uint64_t kUnit = 4096;
  static smb::BufferOptions small_stripes() {
    smb::BufferOptions o;
    o.stripe_unit = kUnit;
    return o;
  }
};

TEST_P(StripedIoTest, OddSizesAndOffsetsMatchALocalModel) {
  auto client = make_client();
  const std::uint64_t size = 3 * kUnit * 5 + 1237;  // not a multiple of the stripe, nor of 8
  auto buffer = client.create("model", size, small_stripes());
  ByteVec model = pattern_bytes(0, size);
  buffer.write(0, model);

  const std::vector<Case> cases = {
      {0, 1},                           // first byte
      {1, 7},                           // inside the first word
      {kUnit - 1, 2},                   // across the first stripe boundary (server 0 -> 1)
      {kUnit - 3, 3 * kUnit + 11},      // across every server and back to server 0
      {3 * kUnit - 3, 6},               // from the last server's stripe to server 0's second
      {2 * kUnit + 1, kUnit - 1},       // a whole stripe but for one byte
      {12345, 33333},                   // long and unaligned
      {size - 5000, 5000},              // the tail, including the short last stripe
      {size - 1, 1},                    // the very last byte
  };
  write_and_check(buffer, buffer, model, cases);
  ByteVec whole(size);
  buffer.read(0, whole);
  EXPECT_TRUE(same_bytes(model, whole)) << "a write spilled outside its range";
}

TEST_P(StripedIoTest, WritesAreVisibleToOtherClientsOnceComplete) {
  auto writer = make_client();
  auto reader = make_client();
  const std::uint64_t size = 7 * kUnit + 3;
  auto w = writer.create("visible", size, small_stripes());
  auto r = reader.open("visible");
  for (std::uint8_t round = 1; round <= 3; ++round) {
    const auto data = pattern_bytes(0, size, round);
    w.write(0, data);
    ByteVec got(size);
    r.read(0, got);
    ASSERT_TRUE(same_bytes(data, got)) << "round " << int{round};
  }
}

TEST_P(StripedIoTest, ManyAsyncRequestsInFlight) {
  auto client = make_client();
  constexpr std::size_t kOps = 16;
  constexpr std::uint64_t kPiece = 3000;  // crosses stripe boundaries at varying points
  auto buffer = client.create("async", kOps * kPiece, small_stripes());
  const auto data = pattern_bytes(0, kOps * kPiece, 0x3C);
  std::vector<smb::Request> writes;
  for (std::size_t i = 0; i < kOps; ++i)
    writes.push_back(buffer.write_async(i * kPiece, std::span(data).subspan(i * kPiece, kPiece)));
  for (auto& w : writes) w.wait();

  ByteVec got(data.size());
  std::vector<smb::Request> reads;
  for (std::size_t i = 0; i < kOps; ++i)
    reads.push_back(buffer.read_async(i * kPiece, std::span(got).subspan(i * kPiece, kPiece)));
  // Poll with test() rather than wait(): both must drive progress.
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  for (auto& r : reads)
    while (!r.test()) ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "test() never completed";
  EXPECT_TRUE(same_bytes(data, got));
}

TEST_P(StripedIoTest, LargeTransferWithDefaultStripes) {
  auto client = make_client();
  const std::uint64_t size = (9u << 20) + 4321;  // 1 MiB stripes over every server, plus a tail
  auto buffer = client.create("large", size);
  const auto data = pattern_bytes(0, size);
  buffer.write(0, data);
  ByteVec got(size);
  buffer.read(0, got);
  EXPECT_TRUE(holds_pattern(got, 0));
}

// The CPU's last-level cache, as libsmb reads it (sysfs; 32 MiB when unknown).
std::uint64_t last_level_cache_bytes() {
  std::uint64_t largest = 0;
  for (int index = 0; index < 8; ++index) {
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
    std::uint64_t kib = 0;
    if (in >> kib) largest = std::max(largest, kib << 10);  // "32768K"
  }
  return largest != 0 ? largest : std::uint64_t{32} << 20;
}

// Over shared memory a client writes a segment larger than the last-level
// cache straight into its mapping of the server's pool with streaming stores
// and reads it from there: unaligned heads and tails, other clients, and the
// server's own vector ops must all see exactly the bytes written.
TEST_P(StripedIoTest, SegmentsLargerThanTheCacheMoveExactly) {
  if (GetParam().label != "ucx_shm") GTEST_SKIP() << "streamed copies are the shared-memory path (ucx_shm)";
  const auto servers = static_cast<std::uint64_t>(GetParam().servers);
  const std::uint64_t share = last_level_cache_bytes() + (1u << 20);
  const std::uint64_t size = servers * share + 4321;
  // Servers that hold a share past the cache: the fabric's 64 MiB do not
  // where the last-level cache is larger (260 MiB on some machines).
  SmbdOptions big;
  big.capacity = std::to_string((share >> 20) + 16) + "M";
  std::vector<std::unique_ptr<SmbdProcess>> daemons;
  smb::ClientOptions options = client_options();
  options.servers.clear();
  for (std::uint64_t i = 0; i < servers; ++i) {
    daemons.push_back(std::make_unique<SmbdProcess>(big));
    options.servers.push_back(daemons.back()->address());
  }
  smb::Client writer(options);
  smb::Client reader(options);
  auto buffer = writer.create("past-the-cache", size);
  ByteVec model = pattern_bytes(0, size);
  buffer.write(0, model);
  auto seen = reader.open("past-the-cache");
  ByteVec whole(size);
  seen.read(0, whole);
  ASSERT_TRUE(holds_pattern(whole, 0));

  const std::vector<Case> cases = {
      {1, 15}, {17, 63}, {4095, 4099}, {(1u << 20) - 33, (1u << 20) + 70}, {size - 777, 777}, {size - 1, 1}};
  write_and_check(buffer, seen, model, cases);
  seen.read(0, whole);
  ASSERT_TRUE(same_bytes(model, whole)) << "a streamed write spilled outside its range";

  // The server adds to what the streamed stores left in its memory.
  constexpr std::uint64_t kFloats = 1u << 18;
  const std::vector<float> ones(kFloats, 1.0f), twos(kFloats, 2.0f);
  std::vector<std::byte> bytes(kFloats * 4);
  std::memcpy(bytes.data(), ones.data(), bytes.size());
  buffer.write(0, bytes);
  std::memcpy(bytes.data(), twos.data(), bytes.size());
  buffer.apply(smb::VectorOp::accumulate, smb::DType::f32, 0, kFloats, 1.0, bytes);
  std::vector<float> sums(kFloats);
  seen.read(0, std::as_writable_bytes(std::span(sums)));
  EXPECT_EQ(std::count(sums.begin(), sums.end(), 3.0f), static_cast<std::ptrdiff_t>(kFloats));
}

// A new buffer reads as zeros, never as a destroyed buffer's bytes: where
// it reuses memory an earlier buffer held, smbd zeroes it; where it takes
// memory never handed out, smbd relies on the kernel's zeros
// (SegmentAllocator::take). This one lands on both on every server.
TEST_P(StripedIoTest, ANewBufferReadsZerosOverADestroyedOnesMemory) {
  auto client = make_client();
  const std::uint64_t old_size = 2ull << 20, new_size = 5ull << 20;
  {
    auto old = client.create("old", old_size, small_stripes());
    old.write(0, pattern_bytes(0, old_size, 9));
    old.close();
  }
  client.destroy("old");
  auto fresh = client.create("fresh", new_size, small_stripes());
  ByteVec got(new_size, std::byte{0x5a});
  fresh.read(0, got);
  const auto nonzero = std::find_if(got.begin(), got.end(), [](std::byte b) { return b != std::byte{0}; });
  EXPECT_EQ(nonzero, got.end()) << "byte " << (nonzero - got.begin()) << " of the new buffer is not zero";
  // And it holds what is written next, as any buffer does.
  const auto data = pattern_bytes(0, new_size, 3);
  fresh.write(0, data);
  fresh.read(0, got);
  EXPECT_TRUE(same_bytes(data, got, 0));
}

// Buffer::mapping: on the server's host over UCX shared memory, a range
// within one stripe is the buffer's own bytes in this process (what one
// writes there another client reads, and the reverse); elsewhere, across a
// stripe's end or for a buffer of two copies, there is none.
TEST_P(StripedIoTest, AMappedRangeIsTheBuffersOwnBytes) {
  auto client = make_client();
  auto buffer = client.create("mapped", 4 * kUnit, small_stripes());
  std::byte* word = buffer.mapping(kUnit + 8, 8);
  if (GetParam().label != "ucx_shm") {
    EXPECT_EQ(word, nullptr) << "only UCX's shared-memory lanes map a server's memory";
    return;
  }
  ASSERT_NE(word, nullptr) << "a client on the server's host over shared memory maps the buffer";
  const std::uint64_t written = 0x1122334455667788;
  std::memcpy(word, &written, 8);
  auto other = make_client().open("mapped");
  std::uint64_t seen = 0;
  other.read(kUnit + 8, std::as_writable_bytes(std::span(&seen, 1)));
  EXPECT_EQ(seen, written) << "a store through the mapping is the buffer's byte";
  const std::uint64_t again = 99;
  other.write(kUnit + 8, std::as_bytes(std::span(&again, 1)));
  std::memcpy(&seen, word, 8);
  EXPECT_EQ(seen, again) << "and another client's write shows there";
  EXPECT_EQ(buffer.mapping(kUnit - 4, 8), nullptr) << "the range crosses a stripe's end";
  EXPECT_THROW(buffer.mapping(4 * kUnit - 4, 8), smb::Error) << "the range is outside the buffer";
  if (server_count() > 1) {
    smb::BufferOptions two = small_stripes();
    two.replicas = 2;
    auto copied = client.create("mapped-twice", 4 * kUnit, two);
    EXPECT_EQ(copied.mapping(0, 8), nullptr) << "a store there would reach one copy only";
  }
}

TEST_P(StripedIoTest, ZeroLengthOpsCompleteAtOnce) {
  auto client = make_client();
  auto buffer = client.create("empty-ops", 4096, small_stripes());
  EXPECT_NO_THROW(buffer.write(0, std::span<const std::byte>{}));
  EXPECT_NO_THROW(buffer.write(4096, std::span<const std::byte>{}));
  EXPECT_NO_THROW(buffer.read(4096, std::span<std::byte>{}));
}

INSTANTIATE_TEST_SUITE_P(Fabrics, StripedIoTest, testing::ValuesIn(all_fabrics()), fabric_name);

}  // namespace
