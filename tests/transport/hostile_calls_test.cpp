// smbd survives hostile data-path calls: the fixed-body calls (vector_call,
// version_call, barrier_call, atomic_call) sent by hand over a real UCX channel to a real
// daemon, malformed or refused after decoding, each get an error reply with
// the right code, and the daemon goes on serving. A call refused after it
// was decoded once ended smbd (found by fuzz_requests): its reply had been
// moved away before the check that threw.
#include "protocol/fixed_calls.hpp"
#include "raw_call.hpp"
#include "smbd_process.hpp"
#include "transport/registry.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace {

using namespace smb;
using namespace smb::protocol;
using namespace std::chrono_literals;

class HostileCallsTest : public testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<test::SmbdProcess>();
    raw_ = std::make_unique<test::RawCallChannel>(server_->address(), "ucx", "hostile-calls");
    transport_ = &raw_->transport();
    channel_ = &raw_->channel();
  }

  // Sends one call and returns its fixed reply.
  FixedReply call(MessageType type, const Bytes& frame, std::span<const std::byte> payload = {}) {
    return raw_->call(type, frame, payload);
  }

  // A segment made over the fixture's own control session; its reply body.
  nlohmann::json alloc(const std::string& name, std::uint64_t length) {
    raw_->control().send(test::msgpack_frame(test::type_of(MessageType::alloc_segment), 2,
                                             {{"name", name}, {"length", length}}));
    const auto reply = raw_->control().receive();
    return reply ? reply->body : nlohmann::json();
  }

  void expect_refused(MessageType type, Bytes frame, Errc code, const char* what) {
    const auto reply = call(type, frame);
    EXPECT_EQ(reply.code, code) << what << ": " << reply.message;
    ASSERT_TRUE(server_->running()) << what << " ended smbd:\n" << server_->log();
  }

  std::unique_ptr<test::SmbdProcess> server_;
  std::unique_ptr<test::RawCallChannel> raw_;  // its control session keeps the channel's ticket admitted
  transport::ClientTransport* transport_ = nullptr;
  transport::Channel* channel_ = nullptr;
};

TEST_F(HostileCallsTest, RefusedCallsGetTheirErrorAndTheDaemonGoesOn) {
  expect_refused(MessageType::barrier_call, encode_barrier_call(1, "b", 0, 1000, 0), Errc::invalid_argument,
                 "a barrier of 0 parties");
  expect_refused(MessageType::barrier_call, encode_barrier_call(2, "b", 2, 0, 0), Errc::invalid_argument,
                 "a barrier with no timeout");
  expect_refused(MessageType::version_call, encode_version_call(3, VersionCallKind::wait, "missing", 1, 1000),
                 Errc::not_found, "a wait on a buffer that is not here");
  expect_refused(MessageType::vector_call, encode_vector_call(4, VectorOp::accumulate, DType::f32, 0, 1, 1, "missing"),
                 Errc::not_found, "an accumulate on a buffer that is not here");
  auto truncated = encode_vector_call(5, VectorOp::accumulate, DType::f32, 0, 1, 1, "name");
  truncated.resize(truncated.size() - 2);
  truncated[12] = static_cast<std::uint8_t>(truncated.size() - kHeaderSize);  // the header agrees; the body lies
  expect_refused(MessageType::vector_call, truncated, Errc::protocol, "a body shorter than its names");
  auto unknown_kind = encode_version_call(6, VersionCallKind::get, "w");
  unknown_kind[kHeaderSize] = 7;
  expect_refused(MessageType::version_call, unknown_kind, Errc::invalid_argument, "an unknown version call kind");
}

TEST_F(HostileCallsTest, ABarrierMetByCallsAnswersEveryParty) {
  // Two parties as two calls on one channel: the first waits for the second.
  Bytes first_reply;
  auto first = std::make_shared<transport::Completion>();
  first->expect();
  const auto first_frame = encode_barrier_call(1, "meet", 2, 5000, 0);
  channel_->call(first_frame, {}, &first_reply, first);
  const auto second = call(MessageType::barrier_call, encode_barrier_call(2, "meet", 2, 5000, 0));
  EXPECT_EQ(second.code, Errc::ok) << second.message;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!first->done() && std::chrono::steady_clock::now() < deadline) transport_->progress();
  ASSERT_TRUE(first->done());
  EXPECT_EQ(decode_fixed_reply(MessageType::barrier_call, first_reply).code, Errc::ok);
  // A party alone times out, with its own error.
  const auto alone = call(MessageType::barrier_call, encode_barrier_call(3, "alone", 2, 50, 0));
  EXPECT_EQ(alone.code, Errc::timeout) << alone.message;
}

// Ordered vector calls (a copy following its primary, VectorRequest::order):
// an op runs only right after the op before it; one whose place is taken is
// refused; one whose predecessor never comes gives up after the gap timeout,
// and the copy then refuses ordered ops at once until set_version.
// Segment names with a copy suffix are checked.
TEST_F(HostileCallsTest, OrderedCallsRunInTheirOrderAndGapsTimeOut) {
  for (const char* bad : {"w#r0", "w#q1", "w#r12", "#r1", "w#r1#r1"})
    EXPECT_EQ(alloc(bad, 64).value("errc", 0), static_cast<int>(Errc::invalid_argument)) << bad;
  ASSERT_TRUE(alloc("w#r1", 64).value("ok", false)) << server_->log();

  const auto scale = [](std::uint32_t id, std::uint64_t order) {
    return encode_vector_call(id, VectorOp::scale, DType::f32, 0, 16, 2, "w#r1", std::nullopt, 0, order);
  };
  EXPECT_EQ(call(MessageType::vector_call, scale(1, 1)).version, 1u);
  expect_refused(MessageType::vector_call, scale(2, 1), Errc::out_of_order, "an order already taken");
  // Order 3 before order 2: it waits, and runs once 2 did.
  Bytes later_reply;
  auto later = std::make_shared<transport::Completion>();
  later->expect();
  const auto later_frame = scale(3, 3);
  channel_->call(later_frame, {}, &later_reply, later);
  for (auto until = std::chrono::steady_clock::now() + 200ms; std::chrono::steady_clock::now() < until;)
    transport_->progress();
  EXPECT_FALSE(later->done()) << "order 3 ran before order 2";
  EXPECT_EQ(call(MessageType::vector_call, scale(4, 2)).version, 2u);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!later->done() && std::chrono::steady_clock::now() < deadline) transport_->progress();
  ASSERT_TRUE(later->done());
  EXPECT_EQ(decode_fixed_reply(MessageType::vector_call, later_reply).version, 3u);
  // Order 9 after 3: its predecessors never come.
  const auto start = std::chrono::steady_clock::now();
  const auto gap = call(MessageType::vector_call, scale(5, 9));
  EXPECT_EQ(gap.code, Errc::timeout) << gap.message;
  EXPECT_NE(gap.message.find("op order 9"), std::string::npos) << gap.message;
  EXPECT_GE(std::chrono::steady_clock::now() - start, 4s);
  EXPECT_EQ(call(MessageType::vector_call, scale(6, 0)).version, 4u) << "an unordered op after the gap";
  // The copy is behind its primary now: an ordered op in its turn is
  // refused at once (no other client waits for the gap again)...
  const auto refused_at = std::chrono::steady_clock::now();
  expect_refused(MessageType::vector_call, scale(7, 5), Errc::out_of_order, "an ordered op on a copy left behind");
  EXPECT_LT(std::chrono::steady_clock::now() - refused_at, 4s) << "it waited for the gap again";
  // ...until a repair gives it its source's version.
  raw_->control().send(test::msgpack_frame(test::type_of(MessageType::set_version), 3, {{"name", "w#r1"}, {"version", 7}}));
  const auto set = raw_->control().receive();
  ASSERT_TRUE(set && set->body.value("ok", false)) << (set ? set->body.dump() : "no reply");
  EXPECT_EQ(call(MessageType::vector_call, scale(8, 8)).version, 8u) << "an ordered op after the repair";
}

// Atomic calls (a replicated buffer's atomics): they answer the old word,
// take their place in the same order as vector ops, and refuse a word that
// is misaligned, past the segment, or on an unknown segment.
TEST_F(HostileCallsTest, AtomicCallsAnswerTheOldWordInTheCopysOrder) {
  ASSERT_TRUE(alloc("a#r1", 64).value("ok", false)) << server_->log();
  const auto add = [](std::uint32_t id, std::uint64_t offset, std::uint64_t value, std::uint64_t order = 0) {
    return encode_atomic_call(id, AtomicKind::fetch_add, "a#r1", offset, value, 0, order);
  };
  const auto cas = [](std::uint32_t id, std::uint64_t expected, std::uint64_t desired, std::uint64_t order = 0) {
    return encode_atomic_call(id, AtomicKind::compare_swap, "a#r1", 56, expected, desired, order);
  };
  auto first = call(MessageType::atomic_call, add(1, 56, 5));
  EXPECT_EQ(first.code, Errc::ok) << first.message;
  EXPECT_EQ(first.old, 0u);
  EXPECT_EQ(first.version, 1u) << "an atomic advances the version like a vector op";
  EXPECT_EQ(call(MessageType::atomic_call, cas(2, 4, 9)).old, 5u) << "no swap";
  EXPECT_EQ(call(MessageType::atomic_call, cas(3, 5, 9, 3)).old, 5u) << "in its order (version 3): swapped";
  EXPECT_EQ(call(MessageType::atomic_call, add(4, 56, 0)).old, 9u);
  expect_refused(MessageType::atomic_call, cas(5, 9, 1, 3), Errc::out_of_order, "an order already taken");
  expect_refused(MessageType::atomic_call, add(6, 12, 1), Errc::invalid_argument, "a misaligned word");
  expect_refused(MessageType::atomic_call, add(7, 64, 1), Errc::out_of_range, "a word past the segment");
  expect_refused(MessageType::atomic_call, add(8, UINT64_MAX - 7, 1), Errc::out_of_range, "a word at 2^64-8");
  expect_refused(MessageType::atomic_call, encode_atomic_call(9, AtomicKind::fetch_add, "nothing", 0, 1),
                 Errc::not_found, "an unknown segment");
  auto bad_kind = add(10, 0, 1);
  bad_kind[kHeaderSize] = 7;
  expect_refused(MessageType::atomic_call, bad_kind, Errc::invalid_argument, "an unknown kind");
  const auto whole = add(11, 0, 1);
  const auto body_length = static_cast<std::uint32_t>(whole.size() - kHeaderSize - 4);
  const auto head = encode_header(Header{kVersion, static_cast<std::uint16_t>(MessageType::atomic_call), 11, body_length});
  Bytes cut(head.begin(), head.end());
  cut.insert(cut.end(), whole.begin() + kHeaderSize, whole.end() - 4);
  expect_refused(MessageType::atomic_call, cut, Errc::protocol, "a body cut short");
  EXPECT_EQ(call(MessageType::atomic_call, add(12, 56, 0)).old, 9u) << "refused calls changed nothing";
}

// A vector op whose source offset splits an element is refused before the
// kernel loads it (it read misaligned doubles before: found by
// fuzz_requests), and the target keeps what it held.
TEST_F(HostileCallsTest, MisalignedSourceOffsetsAreRefused) {
  ASSERT_TRUE(alloc("aligned", 4096).value("ok", false)) << server_->log();
  const auto word = [](std::uint32_t id, std::uint64_t add) {
    return encode_atomic_call(id, AtomicKind::fetch_add, "aligned", 0, add);
  };
  ASSERT_EQ(call(MessageType::atomic_call, word(1, 1234)).code, Errc::ok);
  std::uint32_t id = 2;
  for (std::uint64_t source_offset : {1u, 4u, 2017u})
    expect_refused(MessageType::vector_call,
                   encode_vector_call(id++, VectorOp::axpy, DType::f64, 0, 4, 1.0, "aligned",
                                      std::string_view("aligned"), source_offset),
                   Errc::invalid_argument, ("source offset " + std::to_string(source_offset)).c_str());
  const auto after = call(MessageType::atomic_call, word(id, 0));
  EXPECT_EQ(after.old, 1234u) << "a refused op must leave the target intact";
  EXPECT_EQ(after.version, 2u) << "no refused op advanced the version";
}

// A data channel is served only for an open control session: one that
// presents no ticket (its owner learned the transport address some other
// way) or whose session has closed gets permission_denied, on real smbd.
TEST_F(HostileCallsTest, DataChannelsAreServedOnlyForOpenSessions) {
  test::RawConnection raw(server_->address());
  raw.send(test::msgpack_frame(static_cast<std::uint16_t>(MessageType::hello), 1, {{"client", "t"}, {"transport", "ucx"}}));
  const auto hello = raw.receive();
  ASSERT_TRUE(hello && hello->body.value("ok", false));
  const auto& bytes = hello->body["address"].get_binary();
  const Bytes address(bytes.begin(), bytes.end());
  const auto version = encode_version_call(1, VersionCallKind::get, "nothing");
  // What a version call on a fresh channel presenting `ticket` gets (or its connect).
  const auto served_with = [&](const Bytes& ticket) {
    auto transport = transport::make_client_transport("ucx");
    try {
      auto channel = transport->connect(address, server_->address(), ticket);
      Bytes reply;
      auto done = std::make_shared<transport::Completion>();
      done->expect();
      channel->call(version, {}, &reply, done);
      for (auto until = std::chrono::steady_clock::now() + 10s; !done->done() && std::chrono::steady_clock::now() < until;)
        transport->progress();
      if (!done->done()) return Errc::timeout;
      done->throw_if_failed();
      return decode_fixed_reply(MessageType::version_call, reply).code;
    } catch (const Error& e) {
      return e.code();
    }
  };
  EXPECT_EQ(served_with({}), Errc::permission_denied) << "a channel with no ticket";
  EXPECT_EQ(served_with(Bytes(transport::kTicketLength, 1)), Errc::permission_denied) << "a made-up ticket";
  const auto& ticket = hello->body["ticket"].get_binary();
  EXPECT_EQ(served_with(Bytes(ticket.begin(), ticket.end())), Errc::not_found) << "an open session's ticket: served";
  // The fixture's channel is served while its session is open...
  EXPECT_EQ(call(MessageType::version_call, version).code, Errc::not_found) << "served (no such buffer)";
  // ...and no longer once it closed.
  raw_->close_control();
  FixedReply after;
  for (auto until = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < until;) {
    try {
      after = call(MessageType::version_call, version);
    } catch (const Error& e) {
      after.code = e.code();
    }
    if (after.code == Errc::permission_denied) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(after.code, Errc::permission_denied) << "a closed session's channel was still served";
  ASSERT_TRUE(server_->running());
}

}  // namespace
