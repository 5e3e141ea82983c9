#include "util/stream_copy.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace smb::util {

std::size_t last_level_cache_bytes() {
  static const std::size_t bytes = [] {
    std::size_t largest = 0;
    for (int index = 0; index < 8; ++index) {
      std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
      std::string text;
      if (!(in >> text) || text.empty()) continue;
      std::size_t value = 0;
      std::size_t i = 0;
      for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) value = value * 10 + (text[i] - '0');
      if (i < text.size() && (text[i] == 'K' || text[i] == 'k')) value <<= 10;
      if (i < text.size() && (text[i] == 'M' || text[i] == 'm')) value <<= 20;
      if (value > largest) largest = value;
    }
    return largest != 0 ? largest : std::size_t{32} << 20;
  }();
  return bytes;
}

void stream_copy(void* dst, const void* src, std::size_t length) {
#if defined(__x86_64__)
  auto* out = static_cast<std::byte*>(dst);
  const auto* in = static_cast<const std::byte*>(src);
  // Streaming stores need 16-byte aligned destinations: the head goes by memcpy.
  const std::size_t head = std::min(length, (16 - reinterpret_cast<std::uintptr_t>(out) % 16) % 16);
  std::memcpy(out, in, head);
  out += head;
  in += head;
  length -= head;
  const std::size_t body = length / 64 * 64;
  for (std::size_t off = 0; off < body; off += 64) {
    const auto* s = reinterpret_cast<const __m128i*>(in + off);
    auto* d = reinterpret_cast<__m128i*>(out + off);
    const __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1), c = _mm_loadu_si128(s + 2),
                  e = _mm_loadu_si128(s + 3);
    _mm_stream_si128(d, a);
    _mm_stream_si128(d + 1, b);
    _mm_stream_si128(d + 2, c);
    _mm_stream_si128(d + 3, e);
  }
  std::memcpy(out + body, in + body, length - body);
  _mm_sfence();
#else
  std::memcpy(dst, src, length);
#endif
}

}  // namespace smb::util
