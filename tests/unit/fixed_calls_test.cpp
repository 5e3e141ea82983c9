// The fixed binary calls (protocol/fixed_calls.hpp): what one side writes the
// other reads back, and every malformed body is refused with a protocol or
// argument error, never read past its end.
#include "protocol/fixed_calls.hpp"

#include <gtest/gtest.h>

#include <cstring>

namespace {

using namespace smb;
using namespace smb::protocol;

std::span<const std::uint8_t> body_of(const Bytes& frame) { return std::span(frame).subspan(kHeaderSize); }

Errc code_of(auto&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return Errc::ok;
}

TEST(FixedCalls, VectorCallRoundTrips) {
  const auto frame = encode_vector_call(7, VectorOp::axpy, DType::bf16, 4096, 123, -0.5, "grads", "delta", 8192);
  const auto header = decode_header(std::span(frame).first<kHeaderSize>());
  EXPECT_EQ(header.type, static_cast<std::uint16_t>(MessageType::vector_call));
  EXPECT_EQ(header.request_id, 7u);
  EXPECT_EQ(header.body_length, frame.size() - kHeaderSize);
  const auto call = decode_vector_call(body_of(frame));
  EXPECT_EQ(call.op, VectorOp::axpy);
  EXPECT_EQ(call.type, DType::bf16);
  EXPECT_EQ(call.offset, 4096u);
  EXPECT_EQ(call.count, 123u);
  EXPECT_EQ(call.alpha, -0.5);
  EXPECT_EQ(call.name, "grads");
  ASSERT_TRUE(call.source.has_value());
  EXPECT_EQ(*call.source, "delta");
  EXPECT_EQ(call.source_offset, 8192u);
  EXPECT_EQ(call.order, 0u);
  EXPECT_EQ(decode_vector_call(body_of(encode_vector_call(1, VectorOp::scale, DType::f32, 0, 1, 2, "y#r1", std::nullopt, 0,
                                                          77)))
                .order,
            77u);
  EXPECT_FALSE(decode_vector_call(body_of(encode_vector_call(1, VectorOp::scale, DType::f32, 0, 1, 2, "y"))).source);
}

TEST(FixedCalls, VersionCallRoundTrips) {
  const auto frame = encode_version_call(9, VersionCallKind::wait, "w", 41, 2500);
  const auto call = decode_version_call(body_of(frame));
  EXPECT_EQ(call.kind, VersionCallKind::wait);
  EXPECT_EQ(call.name, "w");
  EXPECT_EQ(call.version, 41u);
  EXPECT_EQ(call.timeout_ms, 2500u);
}

TEST(FixedCalls, BarrierCallRoundTripsAndChecksItsName) {
  const auto call = decode_barrier_call(body_of(encode_barrier_call(4, "epoch/3", 8, 60000, 12)));
  EXPECT_EQ(call.name, "epoch/3");
  EXPECT_EQ(call.parties, 8u);
  EXPECT_EQ(call.timeout_ms, 60000u);
  EXPECT_EQ(call.session, 12u);
  auto frame = encode_barrier_call(4, "ab", 2, 1, 1);
  frame.back() = ' ';  // a name the server would keep must be a valid name
  EXPECT_EQ(code_of([&] { decode_barrier_call(body_of(frame)); }), Errc::invalid_argument);
  frame[kHeaderSize + 26] = 1;  // reserved
  EXPECT_EQ(code_of([&] { decode_barrier_call(body_of(frame)); }), Errc::protocol);
}

TEST(FixedCalls, AtomicCallRoundTripsAndIsChecked) {
  const auto frame = encode_atomic_call(6, AtomicKind::compare_swap, "w#r1", 4104, 7, ~0ull, 12);
  const auto call = decode_atomic_call(body_of(frame));
  EXPECT_EQ(call.kind, AtomicKind::compare_swap);
  EXPECT_EQ(call.name, "w#r1");
  EXPECT_EQ(call.offset, 4104u);
  EXPECT_EQ(call.operand, 7u);
  EXPECT_EQ(call.desired, ~0ull);
  EXPECT_EQ(call.order, 12u);
  const Bytes body(frame.begin() + kHeaderSize, frame.end());
  for (std::size_t n = 0; n < body.size(); ++n)
    EXPECT_EQ(code_of([&] { decode_atomic_call(std::span(body).first(n)); }), Errc::protocol) << n;
  auto with = [&](std::size_t at, std::uint8_t value) {
    Bytes b = body;
    b[at] = value;
    return b;
  };
  EXPECT_EQ(code_of([&] { decode_atomic_call(with(0, 0)); }), Errc::invalid_argument);  // kind 0
  EXPECT_EQ(code_of([&] { decode_atomic_call(with(0, 3)); }), Errc::invalid_argument);  // kind 3
  EXPECT_EQ(code_of([&] { decode_atomic_call(with(1, 1)); }), Errc::protocol);          // reserved
  EXPECT_EQ(code_of([&] { decode_atomic_call(with(2, 9)); }), Errc::protocol);          // name length
  // Its reply carries the old word; a reply cut before it is refused.
  const auto reply = encode_fixed_reply(MessageType::atomic_call, 6, {Errc::ok, 9, {}, 0x1122334455667788ull});
  const auto decoded = decode_fixed_reply(MessageType::atomic_call, reply);
  EXPECT_EQ(decoded.version, 9u);
  EXPECT_EQ(decoded.old, 0x1122334455667788ull);
  EXPECT_EQ(reply.size(), kHeaderSize + kFixedReplySize + 8);
  EXPECT_EQ(code_of([&] { decode_fixed_reply(MessageType::atomic_call, std::span(reply).first(reply.size() - 8)); }),
            Errc::protocol);
  const auto failed = decode_fixed_reply(MessageType::atomic_call,
                                         encode_fixed_reply(MessageType::atomic_call, 6, {Errc::out_of_range, 0, "past"}));
  EXPECT_EQ(failed.code, Errc::out_of_range);
  EXPECT_EQ(failed.message, "past");
}

TEST(FixedCalls, RepliesRoundTripAndCutLongMessages) {
  const auto ok = decode_fixed_reply(MessageType::vector_call,
                                     encode_fixed_reply(MessageType::vector_call, 3, {Errc::ok, 77, {}}));
  EXPECT_EQ(ok.code, Errc::ok);
  EXPECT_EQ(ok.version, 77u);
  const auto failed = decode_fixed_reply(
      MessageType::version_call,
      encode_fixed_reply(MessageType::version_call, 3, {Errc::timeout, 0, std::string(5000, 'x')}));
  EXPECT_EQ(failed.code, Errc::timeout);
  EXPECT_EQ(failed.message.size(), kMaxErrorLength);
  // A reply to another request, or a code from the future, is not taken at face value.
  EXPECT_EQ(code_of([] {
              decode_fixed_reply(MessageType::version_call,
                                 encode_fixed_reply(MessageType::vector_call, 1, {Errc::ok, 1, {}}));
            }),
            Errc::protocol);
  auto future = encode_fixed_reply(MessageType::vector_call, 1, {Errc::ok, 1, {}});
  future[kHeaderSize] = 200;
  EXPECT_EQ(decode_fixed_reply(MessageType::vector_call, future).code, Errc::internal);
}

TEST(FixedCalls, MalformedBodiesAreRefused) {
  const auto frame = encode_vector_call(1, VectorOp::accumulate, DType::f32, 0, 4, 1, "abc");
  const Bytes body(frame.begin() + kHeaderSize, frame.end());
  // Every truncation, and one byte too many.
  for (std::size_t n = 0; n < body.size(); ++n)
    EXPECT_EQ(code_of([&] { decode_vector_call(std::span(body).first(n)); }), Errc::protocol) << n;
  Bytes longer = body;
  longer.push_back(0);
  EXPECT_EQ(code_of([&] { decode_vector_call(longer); }), Errc::protocol);
  auto with = [&](std::size_t at, std::uint8_t value) {
    Bytes b = body;
    b[at] = value;
    return b;
  };
  EXPECT_EQ(code_of([&] { decode_vector_call(with(0, 0)); }), Errc::invalid_argument);   // op 0
  EXPECT_EQ(code_of([&] { decode_vector_call(with(0, 99)); }), Errc::invalid_argument);  // op 99
  EXPECT_EQ(code_of([&] { decode_vector_call(with(1, 0)); }), Errc::invalid_argument);   // dtype 0
  EXPECT_EQ(code_of([&] { decode_vector_call(with(2, 200)); }), Errc::protocol);         // name longer than the body
  EXPECT_EQ(code_of([&] { decode_vector_call(with(6, 1)); }), Errc::protocol);           // reserved
  Bytes no_name(body.begin(), body.begin() + kVectorCallFixedSize);
  no_name[2] = 0;
  EXPECT_EQ(code_of([&] { decode_vector_call(no_name); }), Errc::invalid_argument);
  const auto version = encode_version_call(1, VersionCallKind::get, "abc");
  Bytes vbody(version.begin() + kHeaderSize, version.end());
  vbody[0] = 3;
  EXPECT_EQ(code_of([&] { decode_version_call(vbody); }), Errc::invalid_argument);  // unknown kind
  EXPECT_EQ(code_of([&] { decode_version_call(std::span(vbody).first(10)); }), Errc::protocol);
  const std::string too_long(kMaxSegmentNameLength + 1, 'n');
  EXPECT_EQ(code_of([&] { encode_vector_call(1, VectorOp::accumulate, DType::f32, 0, 1, 1, too_long); }),
            Errc::invalid_argument);
}

}  // namespace
