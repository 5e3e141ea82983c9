// The wire version means something only if it changes with the wire. This
// test takes a fingerprint of everything two releases must agree on (every
// message's number and name, the error codes, the fixed calls' encodings, a layout record,
// the transports' wire headers: sizes and field offsets) and compares it
// with protocol::kWireFingerprint, kept beside kVersion. A change to any of
// them fails here until both are updated, so no wire change ships under an
// old version number.
#include "checkpoint_file.hpp"
#include "protocol/fixed_calls.hpp"
#include "protocol/layout_codec.hpp"
#include "protocol/messages.hpp"
#include "transport/call_wire.hpp"
#include "transport/tcp/tcp_wire.hpp"
#include "transport/ucx/am_wire.hpp"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <string>
#include <unistd.h>

namespace {

namespace proto = smb::protocol;
namespace ucx = smb::transport::ucx;
namespace tcp = smb::transport::tcp;

// A frame's bytes with the version field zeroed: the fingerprint is of the
// schema, so that bumping kVersion alone does not change it.
std::string schema_bytes(proto::Bytes frame) {
  frame[4] = frame[5] = 0;
  return std::string(frame.begin(), frame.end());
}

template <class... Fields>
std::string layout_of(const char* name, std::size_t size, Fields... offsets) {
  std::string out = std::string(name) + ":" + std::to_string(size);
  ((out += "," + std::to_string(offsets)), ...);
  return out + ";";
}

std::string wire_description() {
  std::string wire;
  for (std::uint16_t t = 1; t < 256; ++t) wire += std::to_string(t) + "=" + proto::message_name(t) + ";";
  for (const auto& m : proto::kMessages)  // the schema: paths and fields
    wire += std::string(m.name) + (m.path == proto::Path::call ? ":call:" : ":control:") + std::string(m.request) +
            "->" + std::string(m.reply) + ";";
  for (int c = 0; c <= static_cast<int>(smb::kLastErrc); ++c)  // error codes travel in every reply
    wire += std::to_string(c) + "=" + smb::errc_name(static_cast<smb::Errc>(c)) + ";";
  wire += schema_bytes(proto::encode_vector_call(7, smb::VectorOp::axpy, smb::DType::f32, 64, 3, 0.5, "w",
                                                 std::string_view("d"), 128, 9));
  wire += schema_bytes(proto::encode_version_call(7, proto::VersionCallKind::wait, "w", 3, 100));
  wire += schema_bytes(proto::encode_barrier_call(7, "b", 4, 100, 5));
  wire += schema_bytes(proto::encode_atomic_call(7, proto::AtomicKind::compare_swap, "w", 8, 1, 2, 3));
  wire += schema_bytes(proto::encode_fixed_reply(proto::MessageType::atomic_call, 7,
                                                 proto::FixedReply{smb::Errc::busy, 4, "why", 5}));
  smb::Layout layout{"w", 4096 + 5, 4096, {"127.0.0.1:7000", "127.0.0.1:7001"}, {8192, 5}, {11, 12}, 2,
                     {smb::CopyRef{0, 1}}};
  wire += proto::layout_to_body(layout).dump();
  wire += "replicas<=" + std::to_string(smb::kMaxReplicas) + ";";  // what a layout record may hold
  wire += schema_bytes(proto::encode_frame(1, 7, proto::error_reply(smb::Errc::protocol, "why")));
  wire += layout_of("VectorCallBody", sizeof(proto::VectorCallBody), offsetof(proto::VectorCallBody, source_length),
                    offsetof(proto::VectorCallBody, offset), offsetof(proto::VectorCallBody, count),
                    offsetof(proto::VectorCallBody, alpha), offsetof(proto::VectorCallBody, source_offset),
                    offsetof(proto::VectorCallBody, order));
  wire += layout_of("VersionCallBody", sizeof(proto::VersionCallBody), offsetof(proto::VersionCallBody, version),
                    offsetof(proto::VersionCallBody, timeout_ms));
  wire += layout_of("BarrierCallBody", sizeof(proto::BarrierCallBody), offsetof(proto::BarrierCallBody, session),
                    offsetof(proto::BarrierCallBody, name_length));
  wire += layout_of("AtomicCallBody", sizeof(proto::AtomicCallBody), offsetof(proto::AtomicCallBody, offset),
                    offsetof(proto::AtomicCallBody, order));
  wire += layout_of("AtomicReplyBody", sizeof(proto::AtomicReplyBody), offsetof(proto::AtomicReplyBody, old));
  using smb::transport::CallHeader;
  wire += layout_of("CallHeader", sizeof(CallHeader), offsetof(CallHeader, token), offsetof(CallHeader, frame_length));
  wire += layout_of("AmPingHeader", sizeof(ucx::AmPingHeader));
  wire += layout_of("AmRequestHeader", sizeof(ucx::AmRequestHeader), offsetof(ucx::AmRequestHeader, segment_id),
                    offsetof(ucx::AmRequestHeader, offset), offsetof(ucx::AmRequestHeader, length));
  wire += layout_of("AmAtomicHeader", sizeof(ucx::AmAtomicHeader), offsetof(ucx::AmAtomicHeader, op),
                    offsetof(ucx::AmAtomicHeader, operand), offsetof(ucx::AmAtomicHeader, compare));
  wire += layout_of("AmReplyHeader", sizeof(ucx::AmReplyHeader), offsetof(ucx::AmReplyHeader, status),
                    offsetof(ucx::AmReplyHeader, length));
  wire += "am=" + std::to_string(ucx::kAmWrite) + std::to_string(ucx::kAmRead) + std::to_string(ucx::kAmReply) +
          std::to_string(ucx::kAmAtomic) + std::to_string(ucx::kAmCall) + std::to_string(ucx::kAmPing) +
          std::to_string(ucx::kAmReadBulk) + "," + std::to_string(ucx::kBulkFrom) + "," +
          std::to_string(ucx::kLongHeaderFrame) + ";";
  wire += layout_of("tcp::Hello", sizeof(tcp::Hello), offsetof(tcp::Hello, version),
                    offsetof(tcp::Hello, ticket_length));
  wire += layout_of("tcp::RequestHeader", sizeof(tcp::RequestHeader), offsetof(tcp::RequestHeader, atomic_op),
                    offsetof(tcp::RequestHeader, token), offsetof(tcp::RequestHeader, segment_id),
                    offsetof(tcp::RequestHeader, offset), offsetof(tcp::RequestHeader, length),
                    offsetof(tcp::RequestHeader, operand), offsetof(tcp::RequestHeader, compare),
                    offsetof(tcp::RequestHeader, frame_length));
  wire += layout_of("tcp::ReplyHeader", sizeof(tcp::ReplyHeader), offsetof(tcp::ReplyHeader, status),
                    offsetof(tcp::ReplyHeader, length));
  wire += "tcp=" + std::to_string(tcp::kVersion) + "," + std::to_string(tcp::kMaxCallFrame) + "," +
          std::to_string(tcp::kMaxCallPayload) + "," + std::to_string(tcp::kMaxReplyFrame) + ";";
  return wire;
}

TEST(WireVersion, TheFingerprintBesideTheVersionIsTheWiresOwn) {
  const std::string wire = wire_description();
  const auto fingerprint = XXH3_64bits(wire.data(), wire.size());
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%016llx", static_cast<unsigned long long>(fingerprint));
  EXPECT_EQ(fingerprint, proto::kWireFingerprint)
      << "the wire changed: a message, an error code, a fixed call, the layout record or a transport header. Set "
         "protocol::kVersion (smb-common/protocol/message_schema.hpp) to "
      << proto::kVersion + 1 << " and kWireFingerprint beside it to " << hex
      << ", so that peers of different releases fail at hello instead of mid-session";
}

std::string hex(std::uint64_t v) {
  char out[32];
  std::snprintf(out, sizeof out, "0x%016llx", static_cast<unsigned long long>(v));
  return out;
}

// The checkpoint file likewise: a sample file's bytes, its format field and
// checksum zeroed (both move with kFormat), beside checkpoint::kFormat.
TEST(WireVersion, TheCheckpointFormatsFingerprintIsItsOwn) {
  namespace ckpt = smb::checkpoint;
  const auto path = (std::filesystem::temp_directory_path() /
                     ("smb-format-" + std::to_string(::getpid()) + ".ckpt")).string();
  smb::CheckpointInfo info;
  info.name = "w";
  info.size = 13;
  info.stripe_unit = 4096;
  info.version = 5;
  {
    ckpt::FileWriter writer(path, info);
    const std::string data = "thirteen byte";
    writer.append(std::as_bytes(std::span(data.data(), data.size())));
    writer.finish();
  }
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  ASSERT_GT(bytes.size(), 28u);
  bytes.replace(8, 4, 4, '\0');                   // the format
  bytes.replace(bytes.size() - 16, 8, 8, '\0');   // the checksum, which covers the format
  bytes += "seed=" + std::to_string(ckpt::kChecksumSeed);
  const auto fingerprint = XXH3_64bits(bytes.data(), bytes.size());
  EXPECT_EQ(fingerprint, ckpt::kFormatFingerprint)
      << "the checkpoint file's layout changed. Set checkpoint::kFormat (smb-client/checkpoint_file.hpp) to "
      << ckpt::kFormat + 1 << " and kFormatFingerprint beside it to " << hex(fingerprint)
      << ", so that a file of another format is refused whole, with both formats named";
}

// docs/architecture.md's message table ("| N | `name` | sent to | request ->
// reply |") lists exactly the schema's messages (message_schema.hpp), under
// the same numbers; a call's row says "a call" and no other row does; and
// each row names every field the schema gives its request and reply.
TEST(WireVersion, TheArchitecturesMessageTableIsTheSchema) {
  std::ifstream in(SMB_TEST_ARCHITECTURE_MD);
  ASSERT_TRUE(in) << SMB_TEST_ARCHITECTURE_MD;
  const std::regex row(R"(^\| (\d+) \| `([a-z_]+)` \|(.*)$)");
  std::map<int, std::string> documented;
  std::map<int, std::string> rows;
  for (std::string line; std::getline(in, line);)
    if (std::smatch m; std::regex_search(line, m, row)) {
      documented[std::stoi(m[1])] = m[2];
      rows[std::stoi(m[1])] = m[3];
    }
  std::map<int, std::string> coded;
  for (const auto& message : proto::kMessages) coded[message.number] = std::string(message.name);
  ASSERT_EQ(documented, coded) << "docs/architecture.md's \"Messages\" table and protocol/message_schema.hpp differ";
  const std::regex field("[A-Za-z_][A-Za-z0-9_]*");
  for (const auto& message : proto::kMessages) {
    const std::string& text = rows[message.number];
    EXPECT_EQ(text.find(", a call |") != std::string::npos, message.path == proto::Path::call)
        << message.name << ": the row's \"sent to\" says \", a call\" exactly when the schema's path is call";
    const std::string fields = std::string(message.request) + " " + std::string(message.reply);
    for (std::sregex_iterator it(fields.begin(), fields.end(), field), end; it != end; ++it) {
      const std::string name = it->str();
      if (name == "bin") continue;  // "(bin)": a binary field
      EXPECT_NE(text.find(name), std::string::npos)
          << message.name << ": the schema's field '" << name << "' is missing from its row in docs/architecture.md";
    }
  }
}

// What a mismatch says names both versions and the side to upgrade: the
// older one.
TEST(WireVersion, AMismatchNamesBothVersionsAndWhoToUpgrade) {
  const auto older_client = proto::version_mismatch(2, 3);
  EXPECT_NE(older_client.find("client (libsmb) speaks wire version 2 and smbd version 3"), std::string::npos)
      << older_client;
  EXPECT_NE(older_client.find("upgrade the client"), std::string::npos) << older_client;
  const auto older_server = proto::version_mismatch(3, 2);
  EXPECT_NE(older_server.find("upgrade smbd"), std::string::npos) << older_server;
}

}  // namespace
