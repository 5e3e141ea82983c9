// Parsing of what users type (--capacity, --size, --listen, SMB_SERVERS):
// the units and forms the docs promise, and a clear invalid_argument for
// anything else rather than a silently wrong number.
#include "util/parse.hpp"

#include <smb/client.hpp>
#include <smb/error.hpp>

#include <gtest/gtest.h>

#include <functional>
#include <set>

namespace {

using smb::Errc;

void expect_invalid(const std::function<void()>& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "'" << what << "' was accepted";
  } catch (const smb::Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument) << what << ": " << e.what();
  }
}

TEST(ParseSize, PlainNumbersAndBinarySuffixes) {
  EXPECT_EQ(smb::parse_size("0"), 0u);
  EXPECT_EQ(smb::parse_size("64"), 64u);
  EXPECT_EQ(smb::parse_size("4K"), 4096u);
  EXPECT_EQ(smb::parse_size("4k"), 4096u);
  EXPECT_EQ(smb::parse_size("128M"), 128u << 20);
  EXPECT_EQ(smb::parse_size("2G"), 2ull << 30);
  EXPECT_EQ(smb::parse_size("1T"), 1ull << 40);
}

TEST(ParseSize, AcceptsByteSpellingsOfTheUnits) {
  EXPECT_EQ(smb::parse_size("128MB"), 128u << 20);
  EXPECT_EQ(smb::parse_size("128MiB"), 128u << 20);
  EXPECT_EQ(smb::parse_size("1KiB"), 1024u);
  EXPECT_EQ(smb::parse_size("7 "), 7u);
}

TEST(ParseSize, RejectsWhatIsNotASize) {
  for (const char* bad : {"", "M", "abc", "12Q", "-1", "1.5G", " 5", "0x10", "5 M", "MB", "1e6"})
    expect_invalid([&] { smb::parse_size(bad); }, bad);
}

TEST(ParseSize, RejectsOverflow) {
  expect_invalid([] { smb::parse_size("99999999999999999999"); }, "20 digits");
  expect_invalid([] { smb::parse_size("17179869184G"); }, "2^64 bytes");
  EXPECT_EQ(smb::parse_size("16777215T"), 16777215ull << 40);
}

TEST(ParseHostPort, SplitsHostAndPort) {
  const auto hp = smb::util::parse_host_port("127.0.0.1:7000");
  EXPECT_EQ(hp.host, "127.0.0.1");
  EXPECT_EQ(hp.port, 7000);
  EXPECT_EQ(hp.str(), "127.0.0.1:7000");
  EXPECT_EQ(smb::util::parse_host_port("node-3.cluster:65535").port, 65535);
  EXPECT_EQ(smb::util::parse_host_port("[::1]:7000").host, "::1");
}

TEST(ParseHostPort, PortZeroOnlyWhereAllowed) {
  expect_invalid([] { smb::util::parse_host_port("127.0.0.1:0"); }, "port 0");
  EXPECT_EQ(smb::util::parse_host_port("127.0.0.1:0", /*allow_zero_port=*/true).port, 0);
}

TEST(ParseHostPort, RejectsMalformedAddresses) {
  for (const char* bad : {"", "host", ":7000", "host:", "host:65536", "host:-1", "host:12ab", "host:7000 ", "host: 70"})
    expect_invalid([&] { smb::util::parse_host_port(bad); }, bad);
}

TEST(ParseHostPort, BoundsTheHostAndQuotesItShortInErrors) {
  expect_invalid([] { smb::util::parse_host_port(std::string(254, 'h') + ":7000"); }, "a 254-character host");
  expect_invalid([] { smb::util::parse_host_port("bad host:7000"); }, "a space in the host");
  expect_invalid([] { smb::util::parse_host_port("[]:7000"); }, "an empty bracketed host");
  try {
    smb::util::parse_host_port(std::string(100'000, 'h') + ":x");
  } catch (const smb::Error& e) {
    EXPECT_LT(std::string(e.what()).size(), 300u) << "the address is quoted short";
  }
  EXPECT_EQ(smb::util::parse_host_port(std::string(253, 'h') + ":1").host.size(), 253u);
}

TEST(Quoted, CutsAndEscapes) {
  EXPECT_EQ(smb::util::quoted("abc"), "'abc'");
  EXPECT_EQ(smb::util::quoted(std::string("a\x01\xff", 3)), "'a\\x01\\xff'");
  EXPECT_EQ(smb::util::quoted(std::string(100, 'z')), "'" + std::string(64, 'z') + "'...(100 bytes)");
}

TEST(ParseServerList, SplitsTrimsAndSkipsEmptyItems) {
  EXPECT_EQ(smb::parse_server_list("a:1,b:2"), (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_EQ(smb::parse_server_list(" a:1 , b:2 ,"), (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_EQ(smb::parse_server_list("a:1,,b:2"), (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_TRUE(smb::parse_server_list("").empty());
  EXPECT_EQ(smb::parse_server_list("a:1;b:2; c:3\td:4 e:5"),
            (std::vector<std::string>{"a:1", "b:2", "c:3", "d:4", "e:5"}));
}

TEST(ParseServerList, RejectsABadItem) {
  expect_invalid([] { smb::parse_server_list("a:1,bad"); }, "a:1,bad");
  expect_invalid([] { smb::parse_server_list("a:1,b:0"); }, "a:1,b:0");
}

TEST(FormatBytes, UsesBinaryUnits) {
  EXPECT_EQ(smb::util::format_bytes(0), "0 B");
  EXPECT_EQ(smb::util::format_bytes(1023), "1023 B");
  EXPECT_EQ(smb::util::format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(smb::util::format_bytes(1 << 20), "1.0 MiB");
  EXPECT_EQ(smb::util::format_bytes(3ull << 30), "3.0 GiB");
}

TEST(ErrcName, EveryCodeHasItsOwnName) {
  std::set<std::string> names;
  for (int c = 0; c <= static_cast<int>(smb::kLastErrc); ++c) names.insert(smb::errc_name(static_cast<Errc>(c)));
  EXPECT_EQ(names.size(), static_cast<std::size_t>(smb::kLastErrc) + 1);
}

}  // namespace
