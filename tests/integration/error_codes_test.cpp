// Every bad input gets its own smb::Error code, a message naming the buffer
// (and server where one is involved), and changes nothing on the servers:
// layouts, names and used bytes are the same afterwards. (That the stored
// bytes survive too is errors_keep_data_test.cpp.)
#include "expect_error.hpp"
#include "fabric.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>

#include <limits>
#include <optional>

namespace {

using namespace smb::test;
using smb::Errc;
constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

class ErrorCodesTest : public FabricTest {
 protected:
  static constexpr std::uint64_t kSize = 3 * 4096 * 3 + 5;  // odd: the last word is partial

  void SetUp() override {
    FabricTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    client_.emplace(make_client());
    smb::BufferOptions options;
    options.stripe_unit = 4096;
    buffer_ = client_->create("data", kSize, options);
    used_before_ = used();
  }

  void TearDown() override {
    if (client_ && !HasFailure()) {  // once is enough: a failed check above already said so
      // Nothing a failed call did may have changed the servers' state.
      EXPECT_EQ(used(), used_before_) << "used bytes changed";
      const auto layout = client_->info("data");
      EXPECT_EQ(layout.size, kSize);
      EXPECT_EQ(layout.shares, buffer_.layout().shares);
    }
    buffer_.close();
    client_.reset();
    FabricTest::TearDown();
  }

  std::vector<std::uint64_t> used() {
    std::vector<std::uint64_t> out;
    for (const auto& s : client_->status()) out.push_back(s.used);
    return out;
  }

  std::optional<smb::Client> client_;
  smb::Buffer buffer_;
  std::vector<std::uint64_t> used_before_;
};

TEST_P(ErrorCodesTest, OffsetOrSizeBeyondTheBufferIsOutOfRange) {
  std::vector<std::byte> eight(8), one(1), all(kSize + 1);
  const auto msg = expect_errc(Errc::out_of_range, [&] { buffer_.write(kSize, one); }, "write at the end");
  EXPECT_TRUE(mentions(msg, "data"));
  EXPECT_TRUE(mentions(msg, "write"));
  expect_errc(Errc::out_of_range, [&] { buffer_.write(kSize - 4, eight); }, "write past the end");
  expect_errc(Errc::out_of_range, [&] { buffer_.write(kMax, one); }, "write at 2^64-1");
  expect_errc(Errc::out_of_range, [&] { buffer_.write(kMax - 3, eight); }, "write wrapping around 2^64");
  expect_errc(Errc::out_of_range, [&] { buffer_.read(0, all); }, "read one byte too many");
  expect_errc(Errc::out_of_range, [&] { buffer_.read(kSize + 1, std::span<std::byte>{}); }, "empty read past the end");
  expect_errc(Errc::out_of_range, [&] { buffer_.write_async(kSize, one); }, "async write at the end");
  expect_errc(Errc::out_of_range, [&] { buffer_.read_async(kSize - 7, eight); }, "async read past the end");
  expect_errc(Errc::out_of_range, [&] { buffer_.fetch_add(kSize - 5, 1); }, "fetch-add on the partial last word");
  expect_errc(Errc::out_of_range, [&] { buffer_.fetch_add(kSize + 3, 1); }, "fetch-add past the end");
  expect_errc(Errc::out_of_range, [&] { buffer_.compare_swap(kMax - 7, 0, 1); }, "compare-swap at 2^64-8");
}

TEST_P(ErrorCodesTest, MisalignedAtomicIsInvalidArgument) {
  const auto msg = expect_errc(Errc::invalid_argument, [&] { buffer_.fetch_add(4, 1); }, "fetch-add at 4");
  EXPECT_TRUE(mentions(msg, "data"));
  expect_errc(Errc::invalid_argument, [&] { buffer_.fetch_add(1, 1); }, "fetch-add at 1");
  expect_errc(Errc::invalid_argument, [&] { buffer_.compare_swap(12, 0, 1); }, "compare-swap at 12");
  expect_errc(Errc::invalid_argument, [&] { buffer_.compare_swap(4096 - 4, 0, 1); }, "compare-swap across a stripe");
}

TEST_P(ErrorCodesTest, UnknownNameIsNotFound) {
  auto other = make_client();
  const auto msg = expect_errc(Errc::not_found, [&] { other.open("nope"); }, "open");
  EXPECT_TRUE(mentions(msg, "nope"));
  // Which servers were asked, and the usual cause; not the request's internal name.
  EXPECT_TRUE(mentions(msg, "keeper")) << msg;
  EXPECT_TRUE(mentions(msg, "SMB_SERVERS")) << msg;
  for (const auto& a : addresses()) EXPECT_TRUE(mentions(msg, a)) << "the servers listed: " << msg;
  EXPECT_FALSE(mentions(msg, "hold_layout")) << msg;
  expect_errc(Errc::not_found, [&] { other.info("nope"); }, "info");
  expect_errc(Errc::not_found, [&] { other.destroy("nope"); }, "destroy");
}

TEST_P(ErrorCodesTest, TakenNameIsAlreadyExists) {
  auto other = make_client();
  smb::BufferOptions small_stripes;
  small_stripes.stripe_unit = 64;
  EXPECT_TRUE(mentions(expect_errc(Errc::already_exists, [&] { client_->create("data", kSize); }, "same size"), "data"));
  expect_errc(Errc::already_exists, [&] { other.create("data", 1 << 20); }, "other size, other client");
  expect_errc(Errc::already_exists, [&] { other.create("data", 64, small_stripes); }, "other stripe unit");
}

TEST_P(ErrorCodesTest, TooBigIsNoSpaceAndLeavesNothingBehind) {
  const std::uint64_t everything = static_cast<std::uint64_t>(server_count()) * (64u << 20);
  const auto msg = expect_errc(Errc::no_space, [&] { client_->create("huge", everything); }, "all capacity again");
  EXPECT_TRUE(mentions(msg, "huge"));
  EXPECT_TRUE(mentions(msg, "smbctl rm")) << "what to do next: " << msg;
  EXPECT_FALSE(mentions(msg, "alloc_segment")) << msg;
  bool names_a_server = false;
  for (const auto& a : addresses()) names_a_server |= msg.find(a) != std::string::npos;
  EXPECT_TRUE(names_a_server) << "the message should say which server is full: " << msg;
  const auto beyond = expect_errc(Errc::no_space, [&] { client_->create("huge", 1ull << 62); }, "2^62 bytes");
  EXPECT_TRUE(mentions(beyond, "--capacity") || mentions(beyond, "256 TiB")) << "what to do next: " << beyond;
  const auto over = expect_errc(Errc::no_space, [&] { client_->create("huge", (64ull << 20) * 2 * server_count()); },
                                "twice the capacity");
  EXPECT_TRUE(mentions(over, "larger --capacity")) << "what to do next: " << over;
  EXPECT_FALSE(mentions(over, "reserve_name")) << over;
  smb::BufferOptions one_server;
  one_server.servers = {addresses().front()};
  expect_errc(Errc::no_space, [&] { client_->create("huge", (64u << 20) + 1, one_server); }, "one server");
  if (server_count() > 1) {
    // Fits on every server but the fullest one, which comes last: the others
    // allocate first, so the failure must roll their segments back.
    const auto& l = buffer_.layout();
    smb::BufferOptions last_fails;
    last_fails.stripe_unit = 4096;
    last_fails.servers.assign(l.servers.begin() + 1, l.servers.end());
    last_fails.servers.push_back(l.servers.front());  // holds the tail stripe too: 16 KiB used, not 12
    const std::uint64_t share = (64u << 20) - 3 * 4096;
    expect_errc(Errc::no_space, [&] { client_->create("huge", share * l.servers.size(), last_fails); },
                "full only on the last server");
  }
  EXPECT_EQ(used(), used_before_) << "a failed create must give back what it allocated";
  // The name was not left reserved by the failed attempts.
  auto ok = client_->create("huge", 4096);
  ok.close();
  client_->destroy("huge");
}

TEST_P(ErrorCodesTest, BadCreateArgumentsAreInvalidArgument) {
  smb::BufferOptions zero_stripe, odd_stripe;
  zero_stripe.stripe_unit = 0;
  odd_stripe.stripe_unit = 12;
  expect_errc(Errc::invalid_argument, [&] { client_->create("empty", 0); }, "size 0");
  expect_errc(Errc::invalid_argument, [&] { client_->create("z", 4096, zero_stripe); }, "stripe unit 0");
  expect_errc(Errc::invalid_argument, [&] { client_->create("z", 4096, odd_stripe); }, "stripe unit 12");
  for (const std::string& name : {std::string(), std::string(201, 'n'), std::string("with space"), std::string("a;b")}) {
    expect_errc(Errc::invalid_argument, [&] { client_->create(name, 4096); }, "create '" + name + "'");
    expect_errc(Errc::invalid_argument, [&] { client_->open(name); }, "open '" + name + "'");
  }
  EXPECT_EQ(client_->list().size(), 1u);
}

// A server nobody listens on: what needs it fails at once, naming it; a
// client that reaches no server at all fails to start.
TEST_P(ErrorCodesTest, UnreachableServerIsAnErrorNotAHang) {
  auto options = client_options(std::chrono::milliseconds(3000));
  options.servers.push_back("127.0.0.1:1");  // nothing listens on port 1
  const auto start = std::chrono::steady_clock::now();
  smb::Client some(options);
  EXPECT_EQ(some.unreachable_servers().count("127.0.0.1:1"), 1u);
  const auto msg = expect_errc(
      Errc::unreachable, [&] { some.create("needs-all", 4096); }, "connect to 127.0.0.1:1");
  EXPECT_TRUE(mentions(msg, "127.0.0.1:1"));
  options.servers = {"127.0.0.1:1"};
  const auto none = expect_errc(
      Errc::unreachable, [&] { smb::Client c(options); }, "no memory server could be reached");
  EXPECT_TRUE(mentions(none, "127.0.0.1:1"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

INSTANTIATE_TEST_SUITE_P(Fabrics, ErrorCodesTest, testing::ValuesIn(all_fabrics()), fabric_name);

}  // namespace
