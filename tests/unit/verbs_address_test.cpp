// The verbs transport address (verbs_handles.hpp): what a server tells
// clients about its rails, and what a client refuses to read from it.
#include "transport/verbs/verbs_handles.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <cstring>

namespace smb::transport::verbs {
namespace {

sockaddr_storage ipv4(const char* text) {
  sockaddr_storage out{};
  auto& in = reinterpret_cast<sockaddr_in&>(out);
  in.sin_family = AF_INET;
  ::inet_pton(AF_INET, text, &in.sin_addr);
  return out;
}

sockaddr_storage ipv6(const char* text) {
  sockaddr_storage out{};
  auto& in6 = reinterpret_cast<sockaddr_in6&>(out);
  in6.sin6_family = AF_INET6;
  ::inet_pton(AF_INET6, text, &in6.sin6_addr);
  return out;
}

std::string text_of(const sockaddr_storage& a) { return address_text(reinterpret_cast<const sockaddr*>(&a)); }

TEST(VerbsAddress, ListsEachRailInOrder) {
  const ServerAddress sent{40123, {ipv4("10.0.3.1"), ipv4("10.0.4.1"), ipv6("fd00::7")}};
  const auto bytes = encode_address(sent);
  const auto got = decode_address(bytes, "server:1");
  EXPECT_EQ(got.port, 40123);
  ASSERT_EQ(got.rails.size(), 3u);
  EXPECT_EQ(text_of(got.rails[0]), "10.0.3.1");
  EXPECT_EQ(text_of(got.rails[1]), "10.0.4.1");
  EXPECT_EQ(text_of(got.rails[2]), "fd00::7");
}

// One rail: the six bytes servers have always sent, which older clients read.
TEST(VerbsAddress, OneRailIsTheShortForm) {
  const auto bytes = encode_address(ServerAddress{7000, {ipv4("10.0.3.1")}});
  ASSERT_EQ(bytes.size(), 6u);
  EXPECT_EQ(std::memcmp(bytes.data(), "SMBV", 4), 0);
  const auto got = decode_address(bytes, "server:1");
  EXPECT_EQ(got.port, 7000);
  EXPECT_TRUE(got.rails.empty());
}

TEST(VerbsAddress, RefusesWhatNoServerSends) {
  auto good = encode_address(ServerAddress{1, {ipv4("10.0.3.1"), ipv4("10.0.4.1")}});
  const auto refused = [](std::vector<std::uint8_t> bytes) {
    try {
      decode_address(bytes, "server:1");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::protocol);
      EXPECT_NE(std::string(e.what()).find("server server:1"), std::string::npos) << e.what();
      return true;
    }
    return false;
  };
  auto truncated = good;
  truncated.pop_back();
  EXPECT_TRUE(refused(truncated));
  auto longer = good;
  longer.push_back(0);
  EXPECT_TRUE(refused(longer));
  auto family = good;
  family[7] = 5;  // neither 4 nor 6
  EXPECT_TRUE(refused(family));
  auto count = good;
  count[6] = 200;  // more rails than any server lists
  EXPECT_TRUE(refused(count));
  EXPECT_TRUE(refused({'S', 'M', 'B', 'X', 0, 0}));  // another transport's
  EXPECT_TRUE(refused({'S', 'M', 'B'}));
}

}  // namespace
}  // namespace smb::transport::verbs
