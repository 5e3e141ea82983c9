#pragma once
// The fixed parts of the data-path calls' bodies (message_schema.hpp names
// them), as they lie on the wire after the 16-byte frame header: little
// endian, every field at its natural alignment, reserved fields zero. The
// names (and a vector op's x, as the call's payload) follow the fixed part.
// fixed_calls.cpp copies these in and out whole; the asserts below are the
// layout, and the wire fingerprint (tests/unit/wire_version_test.cpp) takes
// in every size and offset.
#include <bit>
#include <cstddef>
#include <cstdint>

namespace smb::protocol {

static_assert(std::endian::native == std::endian::little,
              "the fixed call bodies are copied as they lie in memory: a little-endian host");

// version_call's and atomic_call's first 8 bytes.
struct KindAndNameLength {
  std::uint8_t kind;
  std::uint8_t reserved8;
  std::uint16_t name_length;
  std::uint32_t reserved32;
};
static_assert(sizeof(KindAndNameLength) == 8 && offsetof(KindAndNameLength, name_length) == 2);

// vector_call: then the segment name, then the source's (when source_length > 0).
struct VectorCallBody {
  std::uint8_t op;
  std::uint8_t dtype;
  std::uint16_t name_length;
  std::uint16_t source_length;
  std::uint16_t reserved16;
  std::uint64_t offset;
  std::uint64_t count;
  double alpha;
  std::uint64_t source_offset;
  std::uint64_t order;
};
static_assert(sizeof(VectorCallBody) == 48);
static_assert(offsetof(VectorCallBody, source_length) == 4 && offsetof(VectorCallBody, offset) == 8 &&
              offsetof(VectorCallBody, count) == 16 && offsetof(VectorCallBody, alpha) == 24 &&
              offsetof(VectorCallBody, source_offset) == 32 && offsetof(VectorCallBody, order) == 40);

// version_call (kind 1 get, 2 wait): then the segment name.
struct VersionCallBody {
  KindAndNameLength head;
  std::uint64_t version;
  std::uint64_t timeout_ms;
};
static_assert(sizeof(VersionCallBody) == 24 && offsetof(VersionCallBody, version) == 8 &&
              offsetof(VersionCallBody, timeout_ms) == 16);

// barrier_call: then the barrier's name.
struct BarrierCallBody {
  std::uint64_t parties;
  std::uint64_t timeout_ms;
  std::uint64_t session;
  std::uint16_t name_length;
  std::uint16_t reserved16;
  std::uint32_t reserved32;
};
static_assert(sizeof(BarrierCallBody) == 32 && offsetof(BarrierCallBody, timeout_ms) == 8 &&
              offsetof(BarrierCallBody, session) == 16 && offsetof(BarrierCallBody, name_length) == 24);

// atomic_call (kind 1 fetch_add, 2 compare_swap): then the segment name.
struct AtomicCallBody {
  KindAndNameLength head;
  std::uint64_t offset;
  std::uint64_t operand;
  std::uint64_t desired;
  std::uint64_t order;
};
static_assert(sizeof(AtomicCallBody) == 40 && offsetof(AtomicCallBody, offset) == 8 &&
              offsetof(AtomicCallBody, operand) == 16 && offsetof(AtomicCallBody, desired) == 24 &&
              offsetof(AtomicCallBody, order) == 32);

// Every call's reply: then the error message (message_length bytes).
struct FixedReplyBody {
  std::uint32_t errc;  // 0: done
  std::uint32_t message_length;
  std::uint64_t version;
};
static_assert(sizeof(FixedReplyBody) == 16 && offsetof(FixedReplyBody, version) == 8);

// atomic_call's reply: the word before the op follows.
struct AtomicReplyBody {
  FixedReplyBody reply;
  std::uint64_t old;
};
static_assert(sizeof(AtomicReplyBody) == 24 && offsetof(AtomicReplyBody, old) == 16);

}  // namespace smb::protocol
