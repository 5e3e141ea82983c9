// What every transport shares (transport/): the pending-op table, the
// channel's failure state, the reply backlog's bound and the call wire.
#include "transport/call_wire.hpp"
#include "transport/channel_health.hpp"
#include "transport/pending_table.hpp"
#include "transport/reply_queue.hpp"

#include <gtest/gtest.h>

namespace smb::transport {
namespace {

struct Op {
  CompletionPtr completion;
  int server = 0;
};

CompletionPtr expecting() {
  auto c = std::make_shared<Completion>();
  c->expect();
  return c;
}

Errc code_of(const Completion& c) {
  try {
    c.throw_if_failed();
  } catch (const Error& e) {
    return e.code();
  }
  return Errc::ok;
}

TEST(PendingTable, MatchesRepliesByTokenOnceAndDropsForgottenOnes) {
  PendingTable<Op> table;
  auto a = expecting(), b = expecting();
  const auto ta = table.add({a, 1});
  const auto tb = table.add({b, 2});
  EXPECT_NE(ta, tb);
  table.forget(*b);  // b's caller timed out
  EXPECT_FALSE(table.take(tb)) << "a late reply for an abandoned op is dropped";
  auto got = table.take(ta);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->server, 1);
  EXPECT_FALSE(table.take(ta)) << "a token answers once";
  EXPECT_FALSE(table.take(12345)) << "a forged token finds nothing";
}

TEST(PendingTable, FailingOneServerFailsOnlyItsOps) {
  PendingTable<Op> table;
  auto a = expecting(), b = expecting();
  table.add({a, 1});
  const auto tb = table.add({b, 2});
  table.fail_if([](const Op& op) { return op.server == 1; }, Errc::server_gone, "server 1 is gone");
  EXPECT_TRUE(a->done());
  EXPECT_EQ(code_of(*a), Errc::server_gone);
  EXPECT_FALSE(b->done());
  EXPECT_TRUE(table.take(tb));
}

TEST(ChannelHealth, TheFirstFailureWinsAndRefusesLaterOps) {
  ChannelHealth health;
  auto before = expecting();
  EXPECT_TRUE(health.admit(before, "write"));
  EXPECT_TRUE(health.fail("server a is gone: first"));
  EXPECT_FALSE(health.fail("second"));
  EXPECT_EQ(health.failure(), "server a is gone: first");
  auto after = expecting();
  EXPECT_FALSE(health.admit(after, "read"));
  EXPECT_TRUE(after->done());
  EXPECT_EQ(code_of(*after), Errc::server_gone);
  EXPECT_THROW(health.throw_if_failed(), Error);
}

TEST(ReplyBacklog, BoundsWhatOneClientLeavesUndelivered) {
  ReplyBacklog backlog;
  for (std::size_t i = 0; i < kMaxUndeliveredReplies; ++i) ASSERT_TRUE(backlog.admit()) << i;
  EXPECT_FALSE(backlog.admit()) << "past the bound the client is cut off";
  backlog.delivered();
  EXPECT_TRUE(backlog.admit());
  EXPECT_GE(kMaxUndeliveredReplies, kCallCredits) << "an honest client is never cut off";
}

TEST(ReplyQueue, HandsEveryReplyToTheTransportThreadInOrder) {
  int wakes = 0;
  ReplyQueue<int> queue([&] { ++wakes; });
  queue.push(1, 10, {1});
  queue.push(2, 20, {2, 2});
  EXPECT_EQ(wakes, 2);
  auto batch = queue.take();
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].token, 10u);
  EXPECT_EQ(batch[1].frame.size(), 2u);
  EXPECT_TRUE(queue.take().empty());
}

TEST(CallWire, AFrameLengthPastTheDataIsRefused) {
  const std::vector<std::uint8_t> data{1, 2, 3, 4};
  auto parts = split_call(data, 3);
  ASSERT_TRUE(parts);
  EXPECT_EQ(parts->frame.size(), 3u);
  EXPECT_EQ(parts->payload.size(), 1u);
  EXPECT_FALSE(split_call(data, 5));
  EXPECT_FALSE(split_call(data, ~0ull));
}

}  // namespace
}  // namespace smb::transport
