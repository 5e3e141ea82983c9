// smbd survives every client: one regression test per way a client killed,
// froze or bloated the daemon before (mistyped fields, replies echoing huge
// strings, deep nesting, requests before hello, stalled frames, running out
// of descriptors, forged layouts, quotas, many locks). Each sends the input
// to a real smbd and then checks that a fresh client is served and that the
// daemon's memory and descriptors are back near where they started.
#include "data.hpp"
#include "process.hpp"
#include "raw_connection.hpp"
#include "server_waits.hpp"
#include "smbd_process.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <thread>

namespace {

using namespace smb::test;
using namespace std::chrono_literals;
using json = nlohmann::json;

constexpr int kInvalidArgument = 1;
constexpr int kNotFound = 3;
constexpr int kNoSpace = 5;
constexpr int kProtocol = 9;
constexpr std::uint16_t kHello = type_of(MessageType::hello), kReserveName = type_of(MessageType::reserve_name),
                        kOpenSegment = type_of(MessageType::open_segment), kStat = type_of(MessageType::stat),
                        kLock = type_of(MessageType::lock), kUnlock = type_of(MessageType::unlock);

class HostileClientTest : public testing::Test {
 protected:
  void start(std::vector<std::string> args = {}, std::optional<std::uint64_t> open_files = std::nullopt) {
    SmbdOptions options;
    options.extra_args = std::move(args);
    options.open_files = open_files;
    server_ = std::make_unique<SmbdProcess>(options);
    expect_serving();  // once before measuring: the first client's lanes and caches
    auto c = client();
    ASSERT_TRUE(pools_in_place(c));  // the pool is faulted in behind smbd's first answers
    baseline_ = server_->usage();
  }

  smb::Client client() const {
    smb::ClientOptions options;
    options.servers = {server_->address()};
    options.timeout = 5s;
    return smb::Client(options);
  }

  std::unique_ptr<RawConnection> greeted() const {
    auto raw = std::make_unique<RawConnection>(server_->address());
    EXPECT_TRUE(raw->hello("ucx")) << server_->log();
    return raw;
  }

  // A session that announced a 1 MiB frame and sent `sent` bytes of it.
  std::unique_ptr<RawConnection> stalled_in_frame(std::size_t sent) const {
    auto raw = greeted();
    RawHeader header;
    header.type = kStat;
    header.body_length = 1u << 20;
    auto bytes = encode_raw_header(header);
    bytes.resize(bytes.size() + sent, 0x90);
    raw->send(bytes);
    return raw;
  }

  // Alive, and a fresh client gets its bytes through.
  void expect_serving() {
    ASSERT_TRUE(server_->running()) << "smbd died: " << server_->exit_status()->describe() << "\n" << server_->log();
    auto c = client();
    const std::string name = "check-" + std::to_string(++round_);
    auto b = c.create(name, 64 * 1024 + 8);
    b.write(0, pattern_bytes(0, b.size()));
    ByteVec got(b.size());
    b.read(0, got);
    EXPECT_TRUE(holds_pattern(got, 0));
    b.close();
    c.destroy(name);
  }

  // Descriptors back to the start (the daemon closes connections
  // asynchronously, so this waits a little), memory within `rss_slack`.
  void expect_resources_back(std::uint64_t rss_slack = 32u << 20) {
    ProcessUsage now;
    for (int i = 0; i < 100; ++i) {
      now = server_->usage();
      if (now.open_fds <= baseline_.open_fds + 2) break;
      std::this_thread::sleep_for(50ms);
    }
    EXPECT_LE(now.open_fds, baseline_.open_fds + 2) << "descriptors at start " << baseline_.open_fds;
    if (kRssIsMeaningful) {
      EXPECT_LE(now.rss_bytes, baseline_.rss_bytes + rss_slack) << "RSS at start " << baseline_.rss_bytes;
    }
  }

  static void expect_error(RawConnection& raw, int errc, const std::string& what, std::size_t max_reply = 4096) {
    auto reply = raw.receive();
    ASSERT_TRUE(reply.has_value()) << what << ": no reply";
    ASSERT_TRUE(reply->body.is_object()) << what;
    EXPECT_FALSE(reply->body.value("ok", true)) << what << ": " << reply->body.dump();
    if (errc != 0) {
      EXPECT_EQ(reply->body.value("errc", 0), errc) << what << ": " << reply->body.dump();
    }
    EXPECT_LE(reply->header.body_length, max_reply) << what << ": the error reply grew with the request";
  }

  std::unique_ptr<SmbdProcess> server_;
  ProcessUsage baseline_;
  int round_ = 0;
};

// Every field of every message, given each wrong MessagePack type: an error
// reply each time (it was std::terminate on a worker thread for the
// MessagePack vector_op of wire versions before 4).
TEST_F(HostileClientTest, MistypedFieldsGetErrorReplies) {
  start();
  const std::vector<std::string> fields = {"name",   "layout", "length", "op",      "dtype",      "offset",
                                           "count",  "alpha",  "data",   "source",  "source_offset",
                                           "version", "timeout_ms", "lease_ms", "token", "parties", "after",
                                           "limit",  "transport", "address"};
  const std::vector<json> wrong = {1, -1, 2.5, nullptr, true, json::binary({1, 2, 3}), json::array({1, "x"}),
                                   json::object({{"k", 1}}), "x"};
  auto raw = greeted();
  std::uint32_t id = 1;
  for (const auto& message : smb::protocol::kMessages) {
    if (message.path != smb::protocol::Path::control || message.number > type_of(MessageType::unlock)) continue;
    const std::uint16_t type = message.number;
    for (const auto& value : wrong) {
      if (type == type_of(MessageType::abandon_name) && value.is_string())
        continue;  // abandon_name {"name": "x"} is a valid request
      json body = json::object();
      for (const auto& f : fields) body[f] = value;
      raw->send(msgpack_frame(type, id, body));
      expect_error(*raw, 0, "type " + std::to_string(type) + " with every field " + value.dump());
      ++id;
    }
  }
  expect_serving();
  expect_resources_back();
}

// A client's long string is quoted short in every error text, so no error
// reply can exceed the frame limit (it ended the process before).
TEST_F(HostileClientTest, LongStringsAreCutInErrorReplies) {
  start();
  const std::string huge(900'000, 'n');
  auto raw = greeted();
  std::uint32_t id = 1;
  for (auto message : {MessageType::commit_layout, MessageType::get_layout, MessageType::open_segment,
                       MessageType::close_segment, MessageType::destroy, MessageType::abandon_name,
                       MessageType::get_version, MessageType::lock, MessageType::unlock}) {
    const auto type = type_of(message);
    raw->send(msgpack_frame(type, id++, {{"name", huge}, {"length", 8}, {"offset", 0}, {"token", 1},
                                         {"parties", 2}, {"timeout_ms", 10}, {"lease_ms", 10}}));
    expect_error(*raw, 0, "type " + std::to_string(type) + " with a 900 kB name");
  }
  raw->send(msgpack_frame(kHello, id++, {{"client", "t"}, {"transport", std::string(60'000, 't')}}));
  expect_error(*raw, kInvalidArgument, "hello asking for a 60 kB transport");
  raw->send(msgpack_frame(kReserveName, id++,
                          {{"layout",
                            {{"name", "l"}, {"size", 8}, {"stripe_unit", 8},
                             {"servers", json::array({std::string(500'000, 'h') + ":1"})}, {"shares", {8}}}}}));
  expect_error(*raw, 0, "a layout naming a 500 kB host");
  expect_serving();
  expect_resources_back();
}

// MessagePack nested 140,000 levels deep overflowed the event thread's stack
// in the recursive parser, and UCX's SIGSEGV handler then froze the daemon.
TEST_F(HostileClientTest, DeepNestingIsRefusedBeforeRecursion) {
  start();
  auto raw = greeted();
  for (std::uint8_t container : {std::uint8_t{0x91}, std::uint8_t{0x81}}) {  // [x] and {"":x}
    RawBytes body = {0x81, 0xa4, 'n', 'a', 'm', 'e'};
    for (int i = 0; i < 140'000; ++i) {
      body.push_back(container);
      if (container == 0x81) body.push_back(0xa0);  // the empty key
    }
    body.push_back(0xc0);
    for (std::uint16_t type : {kStat, kOpenSegment, kLock}) {
      raw->send(raw_frame(type, 7, body));
      expect_error(*raw, kProtocol, "type " + std::to_string(type) + " nested 140,000 deep");
    }
  }
  expect_serving();
  expect_resources_back();
}

// Nothing is served before hello; a connection that never says it is closed.
TEST_F(HostileClientTest, RequestsBeforeHelloAreRefusedAndSilentConnectionsClosed) {
  start({"--hello-timeout", "1"});
  {
    RawConnection raw(server_->address());
    raw.send(msgpack_frame(kStat, 1, json::object()));
    expect_error(raw, kProtocol, "stat before hello");
    EXPECT_TRUE(raw.closed_by_peer()) << "a request before hello should close the connection";
  }
  {
    RawConnection raw(server_->address());
    RawHeader big;
    big.type = kStat;
    big.body_length = 1u << 20;
    raw.send(encode_raw_header(big));  // not hello, and large: refused without reading the body
    expect_error(raw, kProtocol, "a 1 MiB request before hello");
    EXPECT_TRUE(raw.closed_by_peer());
  }
  std::vector<std::unique_ptr<RawConnection>> silent;
  for (int i = 0; i < 50; ++i) silent.push_back(std::make_unique<RawConnection>(server_->address()));
  silent.front()->send(RawBytes{0x53, 0x4d, 0x42});  // a third of a header, then nothing
  for (auto& raw : silent) EXPECT_TRUE(raw->closed_by_peer(5s)) << "no hello within --hello-timeout 1";
  silent.clear();
  expect_serving();
  expect_resources_back();
}

// Headers announcing 1 MiB bodies that never come: memory follows the bytes
// that arrived (it was 1 MiB per connection at once), and --frame-timeout
// closes them.
TEST_F(HostileClientTest, StalledFramesCostWhatArrivedAndTimeOut) {
  start({"--frame-timeout", "2"});
  constexpr int kStalled = 300;
  std::vector<std::unique_ptr<RawConnection>> stalled;
  for (int i = 0; i < kStalled; ++i) stalled.push_back(stalled_in_frame(100));
  std::this_thread::sleep_for(300ms);
  const auto during = server_->usage();
  if (kRssIsMeaningful) {
    EXPECT_LT(during.rss_bytes, baseline_.rss_bytes + (48u << 20))
        << kStalled << " stalled 1 MiB frames should not cost " << kStalled << " MiB";
  }
  expect_serving();  // and others are served meanwhile
  for (auto& raw : stalled) EXPECT_TRUE(raw->closed_by_peer(10s)) << "a stalled frame past --frame-timeout";
  stalled.clear();
  expect_resources_back();
}

// Idle connections beyond the open-file limit: accept errors back off
// instead of spinning a core and flooding the log, and once the idle
// clients go, new ones are served.
TEST_F(HostileClientTest, RunningOutOfDescriptorsBacksOffAndRecovers) {
  start({"--max-connections", "5000"}, 256);  // more connections than descriptors, on purpose
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int i = 0; i < 400; ++i) idle.push_back(std::make_unique<RawConnection>(server_->address()));
  std::this_thread::sleep_for(500ms);
  const auto before = server_->usage();
  const auto log_before = server_->log().size();
  std::this_thread::sleep_for(2s);
  const auto after = server_->usage();
  EXPECT_LT(after.cpu_seconds - before.cpu_seconds, 0.5) << "smbd spun while out of descriptors";
  EXPECT_LT(server_->log().size() - log_before, 4096u) << "smbd flooded its log:\n"
                                                         << server_->log().substr(log_before, 2000);
  EXPECT_NE(server_->log().find("out of file descriptors"), std::string::npos) << server_->log();
  idle.clear();
  expect_serving();
  expect_resources_back();
}

// Without --max-connections the limit follows the open-file limit: extra
// connections are closed at once, and the daemon never runs out.
TEST_F(HostileClientTest, ConnectionLimitFollowsTheOpenFileLimit) {
  start({}, 256);  // (256 - 64) / 4 = 48 connections
  std::vector<std::unique_ptr<RawConnection>> held;
  held.push_back(greeted());
  // start()'s client may still be leaving: wait until this is the only one.
  for (std::uint32_t id = 1;; ++id) {
    held.front()->send(msgpack_frame(kStat, id, {{"limit", 1}}));
    auto stat = held.front()->receive();
    ASSERT_TRUE(stat && stat->body.is_object());
    if (stat->body.value("clients", 0) == 1) break;
    ASSERT_LT(id, 500u) << "start()'s client did not leave";
    std::this_thread::sleep_for(10ms);
  }
  for (int i = 1; i < 48; ++i) held.push_back(greeted());
  RawConnection over(server_->address());
  EXPECT_TRUE(over.closed_by_peer(5s)) << "a connection over the limit should be closed at once";
  EXPECT_NE(server_->log().find("--max-connections"), std::string::npos) << server_->log();
  held.pop_back();
  held.pop_back();
  std::this_thread::sleep_for(200ms);
  expect_serving();
  held.clear();
  expect_resources_back();
}

// Layouts are checked as the client builds them (a 16 EiB layout with a
// one-byte stripe unit was committed and listed before).
TEST_F(HostileClientTest, ForgedLayoutsAreRefused) {
  start();
  const std::string self = server_->address();
  auto layout = [&](std::uint64_t size, std::uint64_t unit, json servers, json shares) {
    return json{{"layout", {{"name", "forged"}, {"size", size}, {"stripe_unit", unit}, {"servers", servers},
                            {"shares", shares}}}};
  };
  auto raw = greeted();
  raw->send(msgpack_frame(kReserveName, 1, layout(UINT64_MAX, 1, {self}, {UINT64_MAX})));
  expect_error(*raw, kProtocol, "16 EiB, stripe unit 1");
  raw->send(msgpack_frame(kReserveName, 2, layout(48, 12, {self}, {48})));
  expect_error(*raw, kProtocol, "stripe unit not a multiple of 8");
  raw->send(msgpack_frame(kReserveName, 3, layout(1ull << 50, 8, {self}, {1ull << 50})));
  expect_error(*raw, kProtocol, "1 PiB on one server");
  raw->send(msgpack_frame(kReserveName, 4, layout(16, 8, {self, self}, {8, 8})));
  expect_error(*raw, kProtocol, "one server twice");
  raw->send(msgpack_frame(kReserveName, 5, layout(1ull << 40, 1u << 20, {self}, {1ull << 40})));
  expect_error(*raw, kNoSpace, "a share larger than this server");
  // A layout under another name than the request's (the one a credential's scope is checked on).
  auto renamed = layout(16, 8, {self}, {16});
  renamed["name"] = "innocent";
  raw->send(msgpack_frame(kReserveName, 6, renamed));
  expect_error(*raw, kInvalidArgument, "a layout named other than its request");
  EXPECT_TRUE(client().list().empty()) << "nothing forged may be committed";
  expect_serving();
}

// What one client may hold is bounded, and the error names the flag.
TEST_F(HostileClientTest, QuotasNameTheirFlag) {
  start({"--max-layouts-per-client", "3", "--max-segments-per-client", "4", "--max-locks-per-client", "2"});
  {
    auto c = client();
    std::vector<smb::Buffer> kept;
    for (int i = 0; i < 3; ++i) kept.push_back(c.create("q" + std::to_string(i), 4096));
    try {
      c.create("q3", 4096);
      ADD_FAILURE() << "a fourth layout record should exceed --max-layouts-per-client 3";
    } catch (const smb::Error& e) {
      EXPECT_EQ(e.code(), smb::Errc::no_space);
      EXPECT_NE(std::string(e.what()).find("--max-layouts-per-client"), std::string::npos) << e.what();
    }
    kept.push_back(c.open("q0"));  // the fourth handle
    try {
      c.open("q1");
      ADD_FAILURE() << "a fifth handle should exceed --max-segments-per-client 4";
    } catch (const smb::Error& e) {
      EXPECT_NE(std::string(e.what()).find("--max-segments-per-client"), std::string::npos) << e.what();
    }
  }
  auto raw = greeted();
  for (std::uint32_t i = 0; i < 3; ++i)
    raw->send(msgpack_frame(kLock, i, {{"name", "lk"}, {"offset", i * 8}, {"length", 8}, {"lease_ms", 60000},
                                       {"timeout_ms", 1000}}));
  EXPECT_TRUE(raw->receive()->body.value("ok", false));
  EXPECT_TRUE(raw->receive()->body.value("ok", false));
  auto third = raw->receive();
  ASSERT_TRUE(third.has_value());
  EXPECT_EQ(third->body.value("errc", 0), kNoSpace) << third->body.dump();
  EXPECT_NE(third->body.value("error", std::string()).find("--max-locks-per-client"), std::string::npos);
  // A new session starts from nothing: the quota is per client.
  auto other = client();
  other.create("q-other", 4096);
  expect_serving();
}

// Locks are indexed by range: many disjoint locks on one name cost
// O(log n) each (100,000 took 29 s of CPU before, and the next round did
// not finish); they release, and a conflicting request still waits.
TEST_F(HostileClientTest, ManyLocksStayCheapAndCorrect) {
  start({"--max-locks-per-client", "1000000"});
  constexpr std::uint32_t kLocks = 20'000;
  auto raw = greeted();
  std::vector<std::uint64_t> tokens;
  const auto cpu_before = server_->usage().cpu_seconds;
  for (std::uint32_t i = 0; i < kLocks; ++i) {
    raw->send(msgpack_frame(kLock, i, {{"name", "many"}, {"offset", std::uint64_t{i} * 16}, {"length", 16},
                                       {"lease_ms", 600000}, {"timeout_ms", 1000}}));
    auto reply = raw->receive();
    ASSERT_TRUE(reply && reply->body.value("ok", false)) << i << ": " << (reply ? reply->body.dump() : "no reply");
    tokens.push_back(reply->body.at("token").get<std::uint64_t>());
  }
  {
    auto other = greeted();  // overlaps lock 100: waits, then times out
    other->send(msgpack_frame(kLock, 1, {{"name", "many"}, {"offset", 1608}, {"length", 4}, {"lease_ms", 1000},
                                         {"timeout_ms", 300}}));
    expect_error(*other, 8 /* timeout */, "a range held by another client");
  }
  for (std::uint32_t i = 0; i < kLocks; ++i) {
    raw->send(msgpack_frame(kUnlock, i, {{"name", "many"}, {"token", tokens[i]}}));
    auto reply = raw->receive();
    ASSERT_TRUE(reply && reply->body.value("ok", false)) << i;
  }
  raw->send(msgpack_frame(kUnlock, 0, {{"name", "many"}, {"token", tokens[0]}}));
  expect_error(*raw, kNotFound, "unlocking twice");
  // Not a speed test (docs/reliability.md has the figures): a generous bound.
  EXPECT_LT(server_->usage().cpu_seconds - cpu_before, 20.0);
  expect_serving();
}

}  // namespace

// All at once, while a client works: many idle (slow) clients that said
// hello and then nothing, clients stalled inside 1 MiB frames, frames that
// announce more than the limit, and frames cut off mid-body by a client that
// leaves. The daemon keeps serving the working client, keeps its stored
// bytes, and its memory follows what arrived, not what was announced.
TEST_F(HostileClientTest, SlowClientsAndOversizedAndTruncatedFramesTogether) {
  start({"--frame-timeout", "3", "--max-connections", "2000"});
  auto keeper = client();
  auto kept = keeper.create("kept", 256 * 1024);
  kept.write(0, pattern_bytes(0, kept.size(), 0x3c));

  std::vector<std::unique_ptr<RawConnection>> idle, stalled;
  for (int i = 0; i < 400; ++i) idle.push_back(greeted());
  for (int i = 0; i < 100; ++i) stalled.push_back(stalled_in_frame(1000));
  for (int i = 0; i < 50; ++i) {
    auto oversized = greeted();
    RawHeader header;
    header.type = kStat;
    header.body_length = (1u << 20) + 1 + static_cast<std::uint32_t>(i) * 4096;  // past the 1 MiB frame limit
    oversized->send(encode_raw_header(header));
    EXPECT_TRUE(oversized->closed_by_peer()) << "a frame larger than the limit must close its connection";
  }
  for (int i = 0; i < 50; ++i) {
    auto truncated = greeted();
    auto frame = msgpack_frame(kReserveName, 7, {{"name", "cut-" + std::to_string(i)}, {"layout", json::object()}});
    frame.resize(frame.size() / 2 + 8);  // the header and half the body, then the client leaves
    truncated->send(frame);
  }
  std::this_thread::sleep_for(300ms);
  const auto during = server_->usage();
  if (kRssIsMeaningful) {
    EXPECT_LT(during.rss_bytes, baseline_.rss_bytes + (48u << 20))
        << "400 idle, 100 stalled 1 MiB frames, 100 oversized or truncated frames";
  }
  expect_serving();
  ByteVec got(kept.size());
  kept.read(0, got);
  EXPECT_TRUE(same_bytes(pattern_bytes(0, kept.size(), 0x3c), got)) << "stored bytes changed";
  for (auto& raw : stalled) EXPECT_TRUE(raw->closed_by_peer(10s)) << "a stalled frame past --frame-timeout";
  stalled.clear();
  idle.clear();
  kept.close();
  keeper.destroy("kept");
  expect_resources_back();
}
