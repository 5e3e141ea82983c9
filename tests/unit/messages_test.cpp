// Control-plane wire format: everything a peer sends is validated before
// use, and every rejection is an smb::Error(protocol), never a crash or a
// foreign exception type escaping into the daemon.
#include "protocol/messages.hpp"

#include <gtest/gtest.h>

#include <random>

namespace {

namespace proto = smb::protocol;
using smb::Errc;

// Runs `f` and checks it throws smb::Error with `code`.
template <class F>
void expect_error(Errc code, F f, const char* what) {
  try {
    f();
    ADD_FAILURE() << what << ": no error";
  } catch (const smb::Error& e) {
    EXPECT_EQ(e.code(), code) << what << ": " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": a non-smb exception escaped: " << e.what();
  }
}

std::array<std::uint8_t, proto::kHeaderSize> header_bytes(proto::Header h) { return proto::encode_header(h); }

TEST(Messages, HeaderRoundTripsAndIsLittleEndianWithMagicFirst) {
  const proto::Header h{proto::kVersion, 0x1234, 0xA1B2C3D4, 77};
  const auto bytes = header_bytes(h);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "SMB1");
  EXPECT_EQ(bytes[6], 0x34);
  EXPECT_EQ(bytes[8], 0xD4);
  const auto back = proto::decode_header(bytes);
  EXPECT_EQ(back.version, h.version);
  EXPECT_EQ(back.type, h.type);
  EXPECT_EQ(back.request_id, h.request_id);
  EXPECT_EQ(back.body_length, h.body_length);
}

TEST(Messages, HeaderWithBadMagicIsRejected) {
  auto bytes = header_bytes({});
  bytes[0] = 'X';
  expect_error(Errc::protocol, [&] { proto::decode_header(bytes); }, "bad magic");
  std::array<std::uint8_t, proto::kHeaderSize> http{};
  std::memcpy(http.data(), "GET / HTTP/1.1\r\n", proto::kHeaderSize);
  expect_error(Errc::protocol, [&] { proto::decode_header(http); }, "an HTTP request");
}

TEST(Messages, HeaderWithOtherVersionIsRejected) {
  for (std::uint16_t v : {std::uint16_t{0}, static_cast<std::uint16_t>(proto::kVersion - 1),
                          static_cast<std::uint16_t>(proto::kVersion + 1), std::uint16_t{0xFFFF}})
    expect_error(Errc::protocol, [&] { proto::decode_header(header_bytes({v, 1, 1, 0})); }, "bad version");
}

// The hello exchange reads any version's header (to answer or report it),
// still checking the magic and the length.
TEST(Messages, FrameHeaderOfAnyVersionIsReadForTheHello) {
  const auto h = proto::decode_frame_header(header_bytes({0xFFFF, 1, 7, 12}));
  EXPECT_EQ(h.version, 0xFFFF);
  EXPECT_EQ(h.request_id, 7u);
  EXPECT_EQ(h.body_length, 12u);
  expect_error(Errc::protocol, [&] { proto::decode_frame_header(header_bytes({3, 1, 1, proto::kMaxBodySize + 1})); },
               "length over the limit, any version");
}

TEST(Messages, HeaderLengthIsBoundedByTheMaximumBody) {
  EXPECT_EQ(proto::decode_header(header_bytes({proto::kVersion, 1, 1, proto::kMaxBodySize})).body_length,
            proto::kMaxBodySize);
  expect_error(Errc::protocol, [&] { proto::decode_header(header_bytes({proto::kVersion, 1, 1, proto::kMaxBodySize + 1})); },
               "length over the limit");
  expect_error(Errc::protocol, [&] { proto::decode_header(header_bytes({proto::kVersion, 1, 1, 0xFFFFFFFFu})); },
               "length 2^32-1");
}

TEST(Messages, FrameIsHeaderPlusMessagePackBody) {
  const proto::Body body{{"name", "w"}, {"length", 4096u}, {"key", proto::binary({1, 2, 3})}};
  const auto frame = proto::encode_frame(static_cast<std::uint16_t>(proto::MessageType::alloc_segment), 9, body);
  ASSERT_GT(frame.size(), proto::kHeaderSize);
  const auto h = proto::decode_header(std::span<const std::uint8_t, proto::kHeaderSize>(frame.data(), proto::kHeaderSize));
  EXPECT_EQ(h.type, static_cast<std::uint16_t>(proto::MessageType::alloc_segment));
  EXPECT_EQ(h.request_id, 9u);
  EXPECT_EQ(h.body_length, frame.size() - proto::kHeaderSize);
  const auto back = proto::decode_body(std::span(frame).subspan(proto::kHeaderSize));
  EXPECT_EQ(back, body);
}

TEST(Messages, OversizedBodyIsRefusedBeforeSending) {
  const proto::Body body{{"blob", proto::binary(proto::Bytes(proto::kMaxBodySize))}};
  expect_error(Errc::invalid_argument, [&] { proto::encode_frame(1, 1, body); }, "body over the limit");
}

TEST(Messages, BodyMustBeExactlyOneMessagePackMap) {
  expect_error(Errc::protocol, [] { proto::decode_body({}); }, "empty body");
  const auto array = proto::Body::to_msgpack(proto::Body::array({1, 2}));
  expect_error(Errc::protocol, [&] { proto::decode_body(array); }, "an array");
  const auto text = proto::Body::to_msgpack(proto::Body("hello"));
  expect_error(Errc::protocol, [&] { proto::decode_body(text); }, "a string");
  auto map = proto::Body::to_msgpack(proto::Body{{"a", 1}, {"b", "xyz"}});
  auto truncated = map;
  truncated.pop_back();
  expect_error(Errc::protocol, [&] { proto::decode_body(truncated); }, "a truncated map");
  map.push_back(0xC0);
  expect_error(Errc::protocol, [&] { proto::decode_body(map); }, "trailing bytes");
}

TEST(Messages, RandomGarbageBodyIsRejectedCleanly) {
  std::mt19937 rng(2024);
  for (int i = 0; i < 3000; ++i) {
    proto::Bytes junk(rng() % 64);
    for (auto& b : junk) b = static_cast<std::uint8_t>(rng());
    try {
      const auto body = proto::decode_body(junk);
      EXPECT_TRUE(body.is_object());  // random bytes may happen to be a valid map
    } catch (const smb::Error& e) {
      EXPECT_EQ(e.code(), Errc::protocol);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "garbage made a non-smb exception escape: " << e.what();
    }
  }
}

TEST(Messages, FieldAccessorsReadWellTypedFields) {
  const proto::Body body{{"s", "text"}, {"n", 42u}, {"b", true}, {"bin", proto::binary({7, 8})}};
  EXPECT_EQ(proto::get_string(body, "s", "t"), "text");
  EXPECT_EQ(proto::get_u64(body, "n", "t"), 42u);
  EXPECT_TRUE(proto::get_bool(body, "b", "t"));
  EXPECT_EQ(proto::get_binary(body, "bin", "t"), (proto::Bytes{7, 8}));
}

TEST(Messages, FieldAccessorsRejectMissingAndWronglyTypedFields) {
  const proto::Body body{{"s", "text"}, {"neg", -1}, {"real", 1.5}, {"b", true}, {"n", 3u}};
  expect_error(Errc::protocol, [&] { proto::get_string(body, "missing", "t"); }, "missing string");
  expect_error(Errc::protocol, [&] { proto::get_string(body, "n", "t"); }, "number as string");
  expect_error(Errc::protocol, [&] { proto::get_u64(body, "s", "t"); }, "string as u64");
  expect_error(Errc::protocol, [&] { proto::get_u64(body, "neg", "t"); }, "negative as u64");
  expect_error(Errc::protocol, [&] { proto::get_u64(body, "real", "t"); }, "double as u64");
  expect_error(Errc::protocol, [&] { proto::get_u64(body, "b", "t"); }, "bool as u64");
  expect_error(Errc::protocol, [&] { proto::get_binary(body, "s", "t"); }, "string as binary");
  expect_error(Errc::protocol, [&] { proto::get_bool(body, "n", "t"); }, "number as bool");
}

TEST(Messages, FieldErrorNamesTheMessageAndTheField) {
  try {
    proto::get_u64(proto::Body::object(), "length", "alloc_segment");
    FAIL() << "no error";
  } catch (const smb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("alloc_segment"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("length"), std::string::npos) << e.what();
  }
}

TEST(Messages, ValidNamesAreAccepted) {
  for (const char* name : {"a", "weights", "resnet50.v2", "job:7/layer@3+x-y", "A.B-C"})
    EXPECT_NO_THROW(proto::validate_name(name)) << name;
  EXPECT_NO_THROW(proto::validate_name(std::string(proto::kMaxNameLength, 'n')));
}

TEST(Messages, BadNamesAreInvalidArguments) {
  using namespace std::string_literals;
  for (const std::string& name : {""s, std::string(proto::kMaxNameLength + 1, 'n'), "has space"s, "tab\t"s,
                                  "nul\0inside"s, "quote'"s, "semi;colon"s, "caf\xc3\xa9"s, "back\\slash"s})
    expect_error(Errc::invalid_argument, [&] { proto::validate_name(name); }, name.c_str());
}

TEST(Messages, ErrorRepliesCarryTheirCodeAndMessage) {
  EXPECT_NO_THROW(proto::throw_if_error(proto::ok_reply({{"x", 1}}), "ctx"));
  EXPECT_EQ(proto::ok_reply({{"x", 1}})["ok"], true);
  try {
    proto::throw_if_error(proto::error_reply(Errc::no_space, "pool is full"), "server s: alloc");
    FAIL() << "no error";
  } catch (const smb::Error& e) {
    EXPECT_EQ(e.code(), Errc::no_space);
    EXPECT_EQ(std::string(e.what()), "server s: alloc: pool is full");
  }
}

TEST(Messages, MalformedRepliesBecomeProtocolOrInternalErrors) {
  expect_error(Errc::protocol, [] { proto::throw_if_error(proto::Body::object(), "c"); }, "no ok field");
  expect_error(Errc::protocol, [] { proto::throw_if_error({{"ok", 1}}, "c"); }, "non-boolean ok");
  for (int code : {0, -3, 99})
    expect_error(Errc::internal, [&] { proto::throw_if_error({{"ok", false}, {"errc", code}}, "c"); },
                 "out-of-range errc");
  expect_error(Errc::internal, [] { proto::throw_if_error({{"ok", false}, {"errc", "x"}, {"error", 5}}, "c"); },
               "mistyped errc and error");
}

TEST(Messages, MessageNamesIgnoreTheReplyBit) {
  const auto alloc = static_cast<std::uint16_t>(proto::MessageType::alloc_segment);
  EXPECT_STREQ(proto::message_name(alloc), "alloc_segment");
  EXPECT_STREQ(proto::message_name(alloc | proto::kReplyBit), "alloc_segment");
  EXPECT_STREQ(proto::message_name(999), "unknown");
}

// Nesting is bounded before the recursive parser runs: 140,000 levels
// overflowed the daemon's stack before.
TEST(Messages, DeepNestingIsAProtocolErrorNotAStackOverflow) {
  for (std::uint8_t container : {std::uint8_t{0x91}, std::uint8_t{0x81}}) {
    std::vector<std::uint8_t> body = {0x81, 0xa1, 'k'};
    for (int i = 0; i < 200'000; ++i) {
      body.push_back(container);
      if (container == 0x81) body.push_back(0xa0);
    }
    body.push_back(0xc0);
    expect_error(Errc::protocol, [&] { proto::decode_body(body); }, "200,000 levels");
  }
  // Our own messages nest three levels: well inside the limit.
  std::vector<std::uint8_t> ok = {0x81, 0xa1, 'k'};
  for (std::size_t i = 1; i < proto::kMaxBodyDepth; ++i) ok.push_back(0x91);
  ok.push_back(0xc0);
  EXPECT_TRUE(proto::decode_body(ok).is_object());
}

// No error reply grows with what a client sent.
TEST(Messages, ErrorTextsAreBounded) {
  const auto reply = proto::error_reply(Errc::not_found, std::string(5'000'000, 'x'));
  EXPECT_LE(reply.at("error").get<std::string>().size(), proto::kMaxErrorLength + 16);
  EXPECT_LE(proto::encode_reply(6, 1, reply).size(), proto::kMaxErrorLength + 64);
  expect_error(Errc::invalid_argument, [] { proto::validate_name(std::string(1'000'000, 'n')); }, "a long name");
  try {
    proto::validate_name(std::string(1'000'000, 'n'));
  } catch (const smb::Error& e) {
    EXPECT_LT(std::string(e.what()).size(), 200u) << "the name is quoted short";
  }
}

// A reply too large for a frame goes out as an error reply, never an exception.
TEST(Messages, OversizedRepliesBecomeErrors) {
  proto::Body big = {{"ok", true}, {"blob", proto::binary(proto::Bytes(proto::kMaxBodySize + 1))}};
  const auto frame = proto::encode_reply(9, 7, big);
  const auto header = proto::decode_header(std::span<const std::uint8_t, proto::kHeaderSize>(frame.data(), proto::kHeaderSize));
  EXPECT_EQ(header.request_id, 7u);
  const auto body = proto::decode_body(std::span<const std::uint8_t>(frame).subspan(proto::kHeaderSize));
  EXPECT_FALSE(proto::is_ok(body));
  EXPECT_EQ(body.at("errc").get<int>(), static_cast<int>(Errc::internal));
}

TEST(Messages, GetNameValidates) {
  expect_error(Errc::invalid_argument, [] { proto::get_name({{"name", "a b"}}, "name", "t"); }, "a space");
  expect_error(Errc::protocol, [] { proto::get_name({{"name", 1}}, "name", "t"); }, "a number");
  EXPECT_EQ(proto::get_name({{"name", "w.v1/x@y"}}, "name", "t"), "w.v1/x@y");
}

}  // namespace
