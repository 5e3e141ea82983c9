// The daemon survives anything a client sends: garbage, lying headers, half
// frames, well-formed frames with nonsense inside. Each bad connection is
// answered with an error or dropped, and the daemon keeps serving the
// clients that behave, including ones connected before the garbage arrived.
#include "data.hpp"
#include "fabric.hpp"
#include "raw_connection.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>

#include <random>

namespace {

using namespace smb::test;
using json = nlohmann::json;

constexpr int kProtocolErrc = 9;  // smb::Errc::protocol on the wire

class ControlPortGarbageTest : public FabricTest {
 protected:
  // A well-behaved client can still do control operations on every server.
  void expect_serving(smb::Client& existing) {
    for (std::size_t i = 0; i < static_cast<std::size_t>(server_count()); ++i)
      EXPECT_TRUE(server(i).running()) << server(i).address() << " died\n" << server(i).log();
    for (const auto& s : existing.status())
      EXPECT_TRUE(s.reachable) << s.address << " no longer answers a client connected before the garbage: " << s.error;
    auto fresh = make_client();
    EXPECT_EQ(fresh.status().size(), static_cast<std::size_t>(server_count()));
    const std::string name = "after-garbage-" + std::to_string(++round_);
    auto b = fresh.create(name, 3 * 4096);
    EXPECT_EQ(existing.open(name).size(), 3u * 4096);
    b.close();
    fresh.destroy(name);
  }

  // The reply to a well-framed but invalid request: an error with `errc`.
  static void expect_error_reply(RawConnection& raw, std::uint32_t request_id, int errc, const std::string& what) {
    auto reply = raw.receive();
    ASSERT_TRUE(reply.has_value()) << what << ": no reply (connection dropped or timed out)";
    EXPECT_EQ(reply->header.magic, kFrameMagic) << what;
    EXPECT_NE(reply->header.type & kReplyBit, 0) << what;
    EXPECT_EQ(reply->header.request_id, request_id) << what;
    ASSERT_TRUE(reply->body.is_object()) << what;
    EXPECT_EQ(reply->body.value("ok", true), false) << what << ": " << reply->body.dump();
    EXPECT_EQ(reply->body.value("errc", 0), errc) << what << ": " << reply->body.dump();
  }

  int round_ = 0;
};

TEST_P(ControlPortGarbageTest, RandomBytesAreDropped) {
  auto existing = make_client();
  std::mt19937 rng(99);
  for (const auto& address : addresses()) {
    RawConnection raw(address);
    RawBytes junk(4096);
    for (auto& b : junk) b = static_cast<std::uint8_t>(rng());
    raw.send(junk);
    EXPECT_TRUE(raw.closed_by_peer()) << "garbage should get the connection closed";
  }
  expect_serving(existing);
}

TEST_P(ControlPortGarbageTest, LyingHeadersAreDropped) {
  auto existing = make_client();
  const auto address = addresses().front();
  RawHeader wrong_version;
  wrong_version.version = 77;
  RawHeader huge_body;
  huge_body.type = 9;
  huge_body.body_length = 0xFFFFFFFFu;
  for (const auto& header : {wrong_version, huge_body}) {
    RawConnection raw(address);
    raw.send(encode_raw_header(header));
    EXPECT_TRUE(raw.closed_by_peer()) << "version " << header.version << ", length " << header.body_length;
  }
  {
    RawConnection http(address);
    http.send(RawBytes{'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P', '/', '1', '.', '1', '\r', '\n', '\r', '\n'});
    EXPECT_TRUE(http.closed_by_peer());
  }
  expect_serving(existing);
}

TEST_P(ControlPortGarbageTest, BadBodiesGetErrorRepliesOnALiveConnection) {
  auto existing = make_client();
  RawConnection raw(addresses().front());
  ASSERT_TRUE(raw.hello(fabric_transport()));
  raw.send(raw_frame(9, 1, {0xC1, 0xFF, 0x00}));  // 0xC1 is never valid MessagePack
  expect_error_reply(raw, 1, kProtocolErrc, "non-MessagePack body");
  raw.send(msgpack_frame(9, 2, json::array({1, 2, 3})));
  expect_error_reply(raw, 2, kProtocolErrc, "array body");
  raw.send(msgpack_frame(5, 3, {{"name", 123}, {"length", "lots"}}));
  expect_error_reply(raw, 3, kProtocolErrc, "alloc_segment with mistyped fields");
  raw.send(msgpack_frame(4242, 4, json::object()));
  expect_error_reply(raw, 4, kProtocolErrc, "unknown message type");
  raw.send(msgpack_frame(2, 5, {{"name", "forged"}, {"layout", {{"name", "forged"}, {"size", 10}}}}));
  expect_error_reply(raw, 5, kProtocolErrc, "reserve_name with a broken layout");
  raw.send(msgpack_frame(5, 6, {{"name", "greedy"}, {"length", 1ull << 62}}));
  expect_error_reply(raw, 6, 5 /* no_space */, "alloc_segment of 2^62 bytes");
  raw.send(msgpack_frame(6, 7, {{"name", "../../etc/passwd"}}));
  expect_error_reply(raw, 7, 3 /* not_found */, "open_segment of an unknown name");
  raw.send(msgpack_frame(9, 8, json::object()));  // and a valid stat still works on the same connection
  auto stat = raw.receive();
  ASSERT_TRUE(stat.has_value());
  EXPECT_EQ(stat->body.value("ok", false), true) << stat->body.dump();
  expect_serving(existing);
  EXPECT_TRUE(existing.list().empty()) << "nothing forged may have been created";
}

TEST_P(ControlPortGarbageTest, HalfSentFramesDoNotBlockOthers) {
  auto existing = make_client();
  std::vector<std::unique_ptr<RawConnection>> stalled;
  for (const auto& address : addresses()) {
    stalled.push_back(std::make_unique<RawConnection>(address));
    auto frame = msgpack_frame(9, 1, json::object());
    frame.resize(frame.size() - 1);  // the last byte never comes
    stalled.back()->send(frame);
    stalled.push_back(std::make_unique<RawConnection>(address));
    stalled.back()->send(RawBytes{0x53, 0x4d});  // half a header
  }
  expect_serving(existing);
}

TEST_P(ControlPortGarbageTest, DataPathStillWorksAfterGarbage) {
  auto existing = make_client();
  smb::BufferOptions o;
  o.stripe_unit = 4096;
  auto buffer = existing.create("survivor", 3 * 4096 + 17, o);
  buffer.write(0, pattern_bytes(0, buffer.size()));
  std::mt19937 rng(5);
  for (const auto& address : addresses()) {
    RawConnection raw(address);
    RawBytes junk(1 << 16);
    for (auto& b : junk) b = static_cast<std::uint8_t>(rng());
    raw.send(junk);
  }
  ByteVec got(buffer.size());
  buffer.read(0, got);
  EXPECT_TRUE(holds_pattern(got, 0));
  auto fresh = make_client();
  ByteVec again(buffer.size());
  fresh.open("survivor").read(0, again);
  EXPECT_TRUE(holds_pattern(again, 0));
}

INSTANTIATE_TEST_SUITE_P(Fabrics, ControlPortGarbageTest, testing::ValuesIn(all_fabrics()), fabric_name);

}  // namespace
