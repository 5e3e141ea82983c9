#pragma once
// Test data for buffer contents. The base pattern is smb-bench's (a byte
// depends only on its absolute offset), so a tool in another process and
// the test agree on what a buffer should hold; a salt gives a second,
// different content for overwrites.
#include <pattern.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace smb::test {

using ByteVec = std::vector<std::byte>;

// The bytes [offset, offset + length) of the verification pattern, XOR salt.
inline ByteVec pattern_bytes(std::uint64_t offset, std::size_t length, std::uint8_t salt = 0) {
  ByteVec out(length);
  bench::fill_pattern(offset, out);
  if (salt != 0)
    for (auto& b : out) b ^= std::byte{salt};
  return out;
}

inline std::uint64_t load_u64(std::span<const std::byte> bytes) {
  std::uint64_t v = 0;
  std::memcpy(&v, bytes.data(), sizeof v);
  return v;
}

inline ByteVec u64_bytes(std::uint64_t v) {
  ByteVec out(sizeof v);
  std::memcpy(out.data(), &v, sizeof v);
  return out;
}

// Equal byte vectors, else the first differing buffer offset (not a dump of
// megabytes). `base` is the buffer offset of element 0.
inline testing::AssertionResult same_bytes(const ByteVec& expected, const ByteVec& got, std::uint64_t base = 0) {
  if (expected.size() != got.size())
    return testing::AssertionFailure() << "sizes differ: expected " << expected.size() << ", got " << got.size();
  for (std::size_t i = 0; i < expected.size(); ++i)
    if (expected[i] != got[i])
      return testing::AssertionFailure() << "first difference at buffer offset " << base + i << ": expected 0x"
                                         << std::hex << std::to_integer<int>(expected[i]) << ", got 0x"
                                         << std::to_integer<int>(got[i]) << std::dec;
  return testing::AssertionSuccess();
}

// The buffer holds the unsalted pattern over [offset, offset + length).
inline testing::AssertionResult holds_pattern(const ByteVec& got, std::uint64_t offset) {
  if (auto bad = bench::find_mismatch(offset, got))
    return testing::AssertionFailure() << "pattern mismatch at buffer offset " << *bad;
  return testing::AssertionSuccess();
}

}  // namespace smb::test
