// Stale copies (Layout::stale): a copy that fell behind the others while its
// server lived -- here a vector op applied on copy 0 only, as a client
// killed between the two copies leaves it -- is recorded in the layout by
// the client that finds it, so that every client leaves it (no read is
// served from it, no ordered op waits for it again), `smbctl info` shows it,
// and `smbctl repair` rebuilds it in place while clients hold the buffer.
// Without the record, losing copy 0's server afterwards made reads return
// the stale copy's older bytes.
#include "process.hpp"
#include "raw_connection.hpp"
#include "replication_fixture.hpp"

#include <smb/vector_ops.hpp>

#include <chrono>

namespace {

using namespace smb::test;

class StaleCopyTest : public ReplicationTest {
 protected:
  static constexpr std::uint64_t kSize = 3 * kUnit * 2;  // two stripes on every server
  static constexpr std::size_t kCount = kSize / sizeof(double);
  static constexpr std::size_t kPerStripe = kUnit / sizeof(double);

  // Makes "lb" (two copies), zeroed, and opens it in a second client (a
  // holder from before the copy falls behind); then applies +1 on the first
  // stripe's copy 0 only, by hand, as a client killed between the copies of
  // its op would; then +1 on everything through `writer`, whose op finds
  // copy 1 of that stripe behind (after smbd's 5 s wait) and records it.
  void make_a_copy_fall_behind() {
    // The writer's op meets smbd's 5 s replica gap (kReplicaGapTimeout): its
    // own timeout must be longer (as libsmb's default 15 s is), or the two
    // expire together and the writer may give up first, recording the
    // copy as unreachable instead of behind (a flake seen in CI).
    writer_ = std::make_unique<smb::Client>(make_client(3 * kTimeout));
    writer_buffer_ = std::make_unique<smb::Buffer>(writer_->create("lb", kSize, replicated()));
    writer_buffer_->write(0, ByteVec(kSize, std::byte{0}));
    holder_ = std::make_unique<smb::Client>(fresh_client());
    holder_buffer_ = std::make_unique<smb::Buffer>(holder_->open("lb"));
    layout_ = writer_->info("lb");
    ASSERT_TRUE(layout_.stale.empty());
    expected_.assign(kCount, 0.0);

    accumulate_on_copy0_of_stripe0();
    for (std::size_t i = 0; i < kPerStripe; ++i) expected_[i] += 1.0;
    add_one(*writer_buffer_);
    const auto recorded = writer_->info("lb").stale;
    ASSERT_EQ(recorded.size(), 1u) << "the copy that missed an op is recorded";
    EXPECT_EQ(recorded[0].replica, 1u);
    EXPECT_EQ(recorded[0].server, 1u) << "copy 1 of the stripes of server 0 lives on server 1";
  }

  // The op a client killed between the copies applied: copy 0 only (one
  // vector_call, made by hand, to server 0's segment of copy 0).
  void accumulate_on_copy0_of_stripe0() {
    const auto applied = run_tool(raw_call_path(), {layout_.servers[0], fabric_transport(), "lb", "0",
                                                    std::to_string(kPerStripe), "1"});
    ASSERT_TRUE(applied.status.success()) << applied.describe();
  }

  void add_one(smb::Buffer& buffer) {
    buffer.apply(smb::VectorOp::accumulate, smb::DType::f64, 0, kCount, 1.0,
                 doubles(std::vector<double>(kCount, 1.0)));
    for (auto& v : expected_) v += 1.0;
  }

  std::vector<double> read_all(smb::Buffer& buffer) {
    ByteVec got(kSize);
    buffer.read(0, got);
    return as_doubles(got);
  }

  // The copy states smbctl info --json gives stripe `position`.
  std::vector<std::string> copy_states(std::size_t position) {
    const auto doc = json_of(run_smbctl({"--json", "info", "lb"}));
    std::vector<std::string> out;
    for (const auto& copy : doc["stripes"][position]["copies"]) out.push_back(copy.value("state", ""));
    return out;
  }

  std::unique_ptr<smb::Client> writer_, holder_;
  std::unique_ptr<smb::Buffer> writer_buffer_, holder_buffer_;
  smb::Layout layout_;
  std::vector<double> expected_;
};

TEST_P(StaleCopyTest, ACopyLeftBehindIsLeftByEveryClientAndNeverServesAfterItsPrimaryIsLost) {
  ASSERT_NO_FATAL_FAILURE(make_a_copy_fall_behind());
  EXPECT_EQ(copy_states(0), (std::vector<std::string>{"ok", "stale"}));
  EXPECT_TRUE(state_of("lb").starts_with("degraded")) << state_of("lb");
  EXPECT_EQ(run_smbctl({"info", "lb"}).status.code, 3) << "a stale copy leaves the buffer degraded";
  EXPECT_TRUE(mentions(run_smbctl({"info", "lb"}).out, "stale")) << run_smbctl({"info", "lb"}).out;

  // The holder opened before the copy fell behind: it is told (or its
  // ordered op is refused at once); either way it does not wait for the
  // op that never comes, which smbd gives 5 s.
  const auto started = std::chrono::steady_clock::now();
  add_one(*holder_buffer_);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(4500))
      << "the holder's op waited for the copy that is behind";
  EXPECT_EQ(read_all(*holder_buffer_), expected_);
  auto later = fresh_client();
  auto later_buffer = later.open("lb");
  EXPECT_EQ(later.info("lb").stale.size(), 1u);
  EXPECT_EQ(read_all(later_buffer), expected_);

  // Copy 0's server is lost: the stale copy must not serve its stripes.
  // (Over shared memory a read may still reach copy 0's memory, mapped
  // here, before this client has seen its server go: then it reads copy
  // 0's bytes, which are whole. Never copy 1's.)
  server(index_of(layout_.servers[0])).kill();
  for (auto* buffer : {writer_buffer_.get(), holder_buffer_.get(), &later_buffer}) {
    try {
      EXPECT_EQ(read_all(*buffer), expected_) << "a read after the loss served other bytes than copy 0's";
      EXPECT_EQ(fabric_transport(), "ucx") << "only UCX can still read a dead server's memory (shared memory)";
    } catch (const smb::Error& e) {
      EXPECT_EQ(e.code(), smb::Errc::server_gone) << e.what();
      EXPECT_TRUE(mentions(e.what(), "can be read")) << e.what();
    }
  }
  // The other stripes are still served whole, from their copies.
  ByteVec elsewhere(kUnit);
  holder_buffer_->read(kUnit, elsewhere);  // stripe 1: server 1's, copy 1 on server 2
  EXPECT_EQ(as_doubles(elsewhere), std::vector<double>(expected_.begin() + kPerStripe, expected_.begin() + 2 * kPerStripe));
  auto fresh = fresh_client();
  expect_error([&] { fresh.open("lb"); }, smb::Errc::data_lost, "stale");
}

TEST_P(StaleCopyTest, RepairRebuildsAStaleCopyInPlaceWhileClientsHoldTheBuffer) {
  ASSERT_NO_FATAL_FAILURE(make_a_copy_fall_behind());
  add_one(*holder_buffer_);  // only copy 0 of stripe 0 gets it: copy 1 is left

  const auto repair = run_smbctl({"--json", "repair", "lb"});
  ASSERT_EQ(repair.status.code, 0) << repair.describe();
  const auto doc = json_of(repair);
  const auto& report = doc["buffers"][0];
  EXPECT_EQ(report.value("result", ""), "repaired") << repair.out;
  ASSERT_EQ(report["repaired"].size(), 1u) << repair.out;
  EXPECT_EQ(report["repaired"][0].value("server", ""), layout_.servers[1]) << repair.out;
  EXPECT_EQ(report["repaired"][0].value("replica", 9), 1) << repair.out;
  EXPECT_EQ(report["repaired"][0].value("source", ""), layout_.servers[0]) << repair.out;
  EXPECT_EQ(report.value("clients_paused", 0), 2) << "the writer and the holder hold it\n" << repair.out;
  EXPECT_EQ(state_of("lb"), "ok");
  EXPECT_TRUE(writer_->info("lb").stale.empty());

  // The rebuilt copy took copy 0's version: ordered ops follow at once again.
  const auto started = std::chrono::steady_clock::now();
  add_one(*holder_buffer_);
  add_one(*writer_buffer_);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(4500));
  EXPECT_EQ(state_of("lb"), "ok") << "no copy fell behind again";

  // Losing copy 0's server leaves stripe 0 only in the rebuilt copy, which
  // holds every acknowledged op, and the one of the killed client.
  server(index_of(layout_.servers[0])).kill();
  EXPECT_EQ(read_all(*holder_buffer_), expected_);
  EXPECT_EQ(read_all(*writer_buffer_), expected_);
  auto fresh = fresh_client();
  auto fresh_buffer = fresh.open("lb");
  EXPECT_EQ(read_all(fresh_buffer), expected_);
}

// mark_stale by hand: it names a copy the layout has, and never the last
// copy of some stripes that is not stale.
TEST_P(StaleCopyTest, MarkingIsCheckedAndKeepsACopyOfEveryStripe) {
  auto client = make_client();
  client.create("lb", kSize, replicated());
  const auto home = server(home_of("lb")).address();
  RawConnection raw(home);
  ASSERT_TRUE(raw.hello(fabric_transport()));
  constexpr std::uint16_t kMarkStale = type_of(MessageType::mark_stale);
  std::uint32_t id = 1;
  const auto mark = [&](const nlohmann::json& body) {
    raw.send(msgpack_frame(kMarkStale, id++, body));
    const auto reply = raw.receive();
    EXPECT_TRUE(reply.has_value());
    return reply ? reply->body : nlohmann::json();
  };
  constexpr int kInvalidArgument = 1, kNotFound = 3, kDataLost = 12;
  EXPECT_EQ(mark({{"name", "lb"}, {"copy", 2}, {"server", 0}}).value("errc", 0), kInvalidArgument);
  EXPECT_EQ(mark({{"name", "lb"}, {"copy", 1}, {"server", 3}}).value("errc", 0), kInvalidArgument);
  EXPECT_EQ(mark({{"name", "lb"}, {"copy", 1}, {"server", 1u << 30}}).value("errc", 0), kInvalidArgument);
  EXPECT_EQ(mark({{"name", "nope"}, {"copy", 1}, {"server", 1}}).value("errc", 0), kNotFound);
  EXPECT_EQ(mark({{"name", "lb"}, {"copy", "1"}, {"server", 1}}).value("ok", true), false);
  const auto first = mark({{"name", "lb"}, {"copy", 1}, {"server", 1}, {"why", "test"}});
  EXPECT_TRUE(first.value("ok", false) && first.value("added", false)) << first.dump();
  const auto again = mark({{"name", "lb"}, {"copy", 1}, {"server", 1}});
  EXPECT_TRUE(again.value("ok", false) && !again.value("added", true)) << "marking twice is no error, and no news\n"
                                                                        << again.dump();
  // Copy 0 of the same stripes (on server 0) is the last one left.
  const auto last = mark({{"name", "lb"}, {"copy", 0}, {"server", 0}});
  EXPECT_EQ(last.value("errc", 0), kDataLost) << last.dump();
  EXPECT_TRUE(mentions(last.value("error", std::string()), "last one")) << last.dump();
  const auto layout = client.info("lb");
  ASSERT_EQ(layout.stale.size(), 1u);
  EXPECT_EQ(layout.stale[0], (smb::CopyRef{1, 1}));
}

INSTANTIATE_TEST_SUITE_P(Fabrics, StaleCopyTest, testing::ValuesIn(multi_server_fabrics()), fabric_name);

}  // namespace
