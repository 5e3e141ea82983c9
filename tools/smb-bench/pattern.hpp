#pragma once
// The data pattern smb-bench writes and checks with --verify.
//
// The byte at absolute buffer offset o depends only on o: it is byte (o % 8)
// (little-endian order) of a 64-bit hash of the word index o / 8. So a reader
// in another process, with any block size or thread split, can check what a
// writer stored, and a stripe that landed at the wrong place is caught.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

namespace smb::bench {

// 64-bit hash of a word index (the splitmix64 finalizer; never the identity).
constexpr std::uint64_t pattern_word(std::uint64_t word_index) noexcept {
  std::uint64_t x = word_index + 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

constexpr std::byte pattern_byte(std::uint64_t offset) noexcept {
  const unsigned shift = static_cast<unsigned>(offset % 8) * 8u;
  return static_cast<std::byte>((pattern_word(offset / 8) >> shift) & 0xFFu);
}

namespace detail {
// Little-endian 8-byte store/load at any alignment.
inline void store_word(std::byte* at, std::uint64_t word) noexcept {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(at, &word, sizeof word);
  } else {
    for (unsigned k = 0; k < 8; ++k) at[k] = static_cast<std::byte>((word >> (8 * k)) & 0xFFu);
  }
}
inline std::uint64_t load_word(const std::byte* at) noexcept {
  std::uint64_t word = 0;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&word, at, sizeof word);
  } else {
    for (unsigned k = 0; k < 8; ++k) word |= std::to_integer<std::uint64_t>(at[k]) << (8 * k);
  }
  return word;
}
}  // namespace detail

// Fills `out` with the pattern of the bytes at [offset, offset + out.size()).
inline void fill_pattern(std::uint64_t offset, std::span<std::byte> out) noexcept {
  std::size_t i = 0;
  for (; i < out.size() && (offset + i) % 8 != 0; ++i) out[i] = pattern_byte(offset + i);
  for (; i + 8 <= out.size(); i += 8) detail::store_word(out.data() + i, pattern_word((offset + i) / 8));
  for (; i < out.size(); ++i) out[i] = pattern_byte(offset + i);
}

// The absolute offset of the first byte of `data` (which holds the bytes at
// [offset, offset + data.size())) that differs from the pattern, if any.
inline std::optional<std::uint64_t> find_mismatch(std::uint64_t offset,
                                                  std::span<const std::byte> data) noexcept {
  std::size_t i = 0;
  auto check_bytes = [&](std::size_t end) -> std::optional<std::uint64_t> {
    for (; i < end; ++i)
      if (data[i] != pattern_byte(offset + i)) return offset + i;
    return std::nullopt;
  };
  std::size_t head = 0;
  while (head < data.size() && (offset + head) % 8 != 0) ++head;
  if (auto bad = check_bytes(head)) return bad;
  for (; i + 8 <= data.size(); i += 8) {
    if (detail::load_word(data.data() + i) != pattern_word((offset + i) / 8)) {
      return check_bytes(i + 8);  // the first differing byte of this word
    }
  }
  return check_bytes(data.size());
}

}  // namespace smb::bench
