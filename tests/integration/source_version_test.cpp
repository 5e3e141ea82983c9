// A repair reads its source copy's version with get_version (message 13)
// and gives it to the copy it rebuilt. An answer taken while an op is being
// applied named the version before the op while the bytes were half way
// through it (issue 36, "the JSON get_version answers mid-op"): it must come
// between ops, as version_call's settled read does.
#include "protocol/messages.hpp"
#include "raw_connection.hpp"
#include "smbd_process.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>

namespace {

using smb::test::MessageType;
using smb::test::msgpack_frame;
using smb::test::RawConnection;
using smb::test::type_of;

// The version a raw session's get_version answers for `segment`.
std::uint64_t get_version(RawConnection& raw, const std::string& segment, std::uint32_t id) {
  EXPECT_TRUE(raw.send(msgpack_frame(type_of(MessageType::get_version), id, {{"name", segment}})));
  auto reply = raw.receive(std::chrono::seconds(30));
  EXPECT_TRUE(reply && reply->body.is_object() && reply->body.value("ok", false))
      << (reply ? reply->body.dump() : std::string("no reply"));
  return reply ? reply->body.value("version", std::uint64_t{0}) : 0;
}

TEST(SourceVersionTest, AGetVersionDuringAnOpIsAnsweredAfterIt) {
  smb::test::SmbdOptions server;
  server.capacity = "600M";
  smb::test::SmbdProcess smbd(server);
  smb::ClientOptions options;
  options.servers = {smbd.address()};
  smb::Client client(options);
  constexpr std::uint64_t kFloats = 64ull << 20;  // 256 MiB: a scale takes tens of ms on the server
  smb::BufferOptions placement;
  placement.stripe_unit = kFloats * 4;
  auto buffer = client.create("source-version", kFloats * 4, placement);
  const auto segment = smb::protocol::segment_name("source-version", 0);
  RawConnection raw(smbd.address());
  ASSERT_TRUE(raw.hello("ucx"));

  // Each try: one scale in flight (its version is the try's number after
  // it), and a get_version sent while it runs. An answer that names the
  // version before the op while it runs is the defect; one taken before the
  // op began is fine, so some tries may not catch it in flight, not all.
  int caught_in_flight = 0;
  for (std::uint32_t attempt = 1; attempt <= 6; ++attempt) {
    const std::uint64_t before = buffer.version();
    std::thread op([&] { buffer.apply(smb::VectorOp::scale, smb::DType::f32, 0, kFloats, 1.0); });
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const auto answered = get_version(raw, segment, attempt);
    op.join();
    const std::uint64_t after = buffer.version();
    ASSERT_EQ(after, before + 1);
    ASSERT_TRUE(answered == before || answered == after) << answered;
    if (answered == after) ++caught_in_flight;
  }
  EXPECT_GT(caught_in_flight, 0) << "no get_version sent during a 256 MiB scale waited for it to end";
}

}  // namespace
