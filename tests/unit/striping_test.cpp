// Striping arithmetic: every byte of a request must land on exactly one
// server at the right local offset, pieces must be merged only where
// contiguous on both sides, and the servers' shares must add up to the size.
#include "protocol/striping.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace {

using smb::protocol::split_range;
using smb::protocol::StripeGeometry;
using smb::protocol::StripePiece;

std::uint64_t total_shares(const StripeGeometry& g) {
  std::uint64_t sum = 0;
  for (std::uint32_t i = 0; i < g.servers; ++i) sum += g.share(i);
  return sum;
}

// Byte-by-byte reference: stripe k lives on server k mod N at (k div N) * U.
void expect_pieces_match_model(const StripeGeometry& g, std::uint64_t offset, std::uint64_t length) {
  const auto pieces = split_range(g, offset, length);
  std::uint64_t next_request_byte = 0;
  for (const StripePiece& p : pieces) {
    ASSERT_GT(p.length, 0u);
    ASSERT_LT(p.server, g.servers);
    ASSERT_EQ(p.request_offset, next_request_byte) << "pieces must tile the request in order";
    ASSERT_LE(p.local_offset + p.length, g.share(p.server)) << "piece runs past its server's share";
    for (std::uint64_t i = 0; i < p.length; i += std::max<std::uint64_t>(1, p.length / 7)) {
      const std::uint64_t byte = offset + p.request_offset + i;
      const std::uint64_t stripe = byte / g.stripe_unit;
      ASSERT_EQ(p.server, stripe % g.servers) << "byte " << byte;
      ASSERT_EQ(p.local_offset + i, (stripe / g.servers) * g.stripe_unit + byte % g.stripe_unit) << "byte " << byte;
    }
    next_request_byte += p.length;
  }
  ASSERT_EQ(next_request_byte, length) << "pieces must cover the whole request";
}

TEST(Striping, SharesOfAnOddSizeFollowTheStripeOrder) {
  constexpr std::uint64_t U = 4096;
  const StripeGeometry g{10 * U + 5, U, 3};  // stripes 0..9 full, stripe 10 holds 5 bytes
  EXPECT_EQ(g.share(0), 4 * U);              // stripes 0, 3, 6, 9
  EXPECT_EQ(g.share(1), 3 * U + 5);          // stripes 1, 4, 7 and the tail
  EXPECT_EQ(g.share(2), 3 * U);              // stripes 2, 5, 8
  EXPECT_EQ(g.share(3), 0u) << "no such server";
}

TEST(Striping, SharesAlwaysSumToTheSize) {
  for (std::uint64_t unit : {8u, 24u, 4096u, 1u << 20})
    for (std::uint32_t servers : {1u, 2u, 3u, 5u, 8u})
      for (std::uint64_t size : std::vector<std::uint64_t>{1, 7, unit - 1, unit, unit + 1, 3 * unit,
                                                           7 * unit + 3, 1000003, std::uint64_t{96} << 20})
        EXPECT_EQ(total_shares({size, unit, servers}), size) << size << "/" << unit << "/" << servers;
}

TEST(Striping, DegenerateGeometryHasNoShareAndNoPieces) {
  EXPECT_EQ(StripeGeometry({100, 8, 0}).share(0), 0u);
  EXPECT_EQ(StripeGeometry({100, 0, 2}).share(0), 0u);
  EXPECT_TRUE(split_range({100, 8, 0}, 0, 10).empty());
  EXPECT_TRUE(split_range({100, 0, 2}, 0, 10).empty());
  EXPECT_TRUE(split_range({100, 8, 2}, 5, 0).empty());
}

TEST(Striping, OneServerMergesEverythingIntoOnePiece) {
  const StripeGeometry g{10 * 4096 + 3, 4096, 1};
  const auto pieces = split_range(g, 17, g.size - 17);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].local_offset, 17u);
  EXPECT_EQ(pieces[0].length, g.size - 17);
}

TEST(Striping, RangeInsideOneStripeIsOnePiece) {
  const StripeGeometry g{100 * 4096, 4096, 3};
  const auto pieces = split_range(g, 5 * 4096 + 10, 100);  // stripe 5 -> server 2, its 2nd stripe
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].server, 2u);
  EXPECT_EQ(pieces[0].local_offset, 4096u + 10);
  EXPECT_EQ(pieces[0].request_offset, 0u);
}

TEST(Striping, RangeCrossingServersSplitsAtStripeBoundaries) {
  constexpr std::uint64_t U = 4096;
  const StripeGeometry g{100 * U, U, 3};
  const auto pieces = split_range(g, U - 1, 2 * U + 2);  // last byte of stripe 0 .. first byte of stripe 3
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[0].server, 0u);
  EXPECT_EQ(pieces[0].length, 1u);
  EXPECT_EQ(pieces[1].server, 1u);
  EXPECT_EQ(pieces[1].length, U);
  EXPECT_EQ(pieces[2].server, 2u);
  EXPECT_EQ(pieces[3].server, 0u);
  EXPECT_EQ(pieces[3].local_offset, U) << "stripe 3 is server 0's second stripe";
  EXPECT_EQ(pieces[3].length, 1u);
}

TEST(Striping, StripesOfOneServerAreNotMergedAcrossOtherServers) {
  // Server 0's stripes 0 and 3 are adjacent on the server but not in the request.
  const StripeGeometry g{6 * 4096, 4096, 3};
  EXPECT_EQ(split_range(g, 0, g.size).size(), 6u);
}

TEST(Striping, WholeBufferGivesEachServerItsShare) {
  for (std::uint32_t servers : {1u, 2u, 3u, 4u}) {
    const StripeGeometry g{13 * 4096 + 777, 4096, servers};
    std::vector<std::uint64_t> bytes(servers);
    for (const auto& p : split_range(g, 0, g.size)) bytes[p.server] += p.length;
    for (std::uint32_t i = 0; i < servers; ++i) EXPECT_EQ(bytes[i], g.share(i)) << "server " << i;
  }
}

TEST(Striping, OddOffsetsAndSizesMatchTheByteModel) {
  for (std::uint64_t unit : {8u, 24u, 64u, 4096u})
    for (std::uint32_t servers : {1u, 2u, 3u, 5u}) {
      const StripeGeometry g{17 * unit + 5, unit, servers};
      for (std::uint64_t offset : std::vector<std::uint64_t>{0, 1, unit - 1, unit, 2 * unit + 3, g.size - 1})
        for (std::uint64_t length : std::vector<std::uint64_t>{1, 7, unit, unit + 1, 3 * unit + 2, g.size})
          if (offset + length <= g.size) {
            ASSERT_NO_FATAL_FAILURE(expect_pieces_match_model(g, offset, length));
          }
    }
}

TEST(Striping, RandomRangesMatchTheByteModel) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const std::uint64_t unit = 8 * (1 + rng() % 64);
    const auto servers = static_cast<std::uint32_t>(1 + rng() % 6);
    const std::uint64_t size = 1 + rng() % (40 * unit);
    const std::uint64_t offset = rng() % size;
    const std::uint64_t length = 1 + rng() % (size - offset);
    ASSERT_NO_FATAL_FAILURE(expect_pieces_match_model({size, unit, servers}, offset, length));
  }
}

}  // namespace
