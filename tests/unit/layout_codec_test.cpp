// Layout records travel between clients and home servers: a record must
// round-trip exactly, and one that a peer got wrong (or forged) must be
// rejected before anyone stripes data by it.
#include "protocol/layout_codec.hpp"
#include "protocol/striping.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace {

namespace proto = smb::protocol;
using smb::Errc;

smb::Layout sample_layout() {
  smb::Layout l{"weights.v1", 10 * 4096 + 5, 4096, {"127.0.0.1:7000", "127.0.0.1:7001", "10.0.0.2:7000"}, {}, {}, 1, {}};
  const proto::StripeGeometry g{l.size, l.stripe_unit, 3};
  for (std::uint32_t i = 0; i < 3; ++i) l.shares.push_back(g.share(i));
  return l;
}

void expect_rejected(const proto::Body& body, Errc code, const char* what) {
  try {
    proto::layout_from_body(body, "get_layout");
    ADD_FAILURE() << what << ": accepted";
  } catch (const smb::Error& e) {
    EXPECT_EQ(e.code(), code) << what << ": " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": a non-smb exception escaped: " << e.what();
  }
}

TEST(LayoutCodec, RoundTripsExactly) {
  const auto l = sample_layout();
  const auto back = proto::layout_from_body(proto::layout_to_body(l), "t");
  EXPECT_EQ(back.name, l.name);
  EXPECT_EQ(back.size, l.size);
  EXPECT_EQ(back.stripe_unit, l.stripe_unit);
  EXPECT_EQ(back.servers, l.servers);
  EXPECT_EQ(back.shares, l.shares);
}

// The servers' runs that hold the shares travel with the layout; a layout
// without them (made before servers had them) still reads; a wrong number
// or a non-number is refused.
TEST(LayoutCodec, ServerInstancesRoundTripAndAreChecked) {
  auto l = sample_layout();
  EXPECT_FALSE(proto::layout_to_body(l).contains("instances"));
  EXPECT_TRUE(proto::layout_from_body(proto::layout_to_body(l), "t").instances.empty());
  l.instances = {7, 0xFFFFFFFFFFFFFFFFull, 42};
  EXPECT_EQ(proto::layout_from_body(proto::layout_to_body(l), "t").instances, l.instances);
  auto b = proto::layout_to_body(l);
  b["instances"] = proto::Body::array({1, 2});
  expect_rejected(b, Errc::protocol, "two instances for three servers");
  b["instances"] = proto::Body::array({1, "two", 3});
  expect_rejected(b, Errc::protocol, "an instance that is not a number");
  b["instances"] = 5;
  expect_rejected(b, Errc::protocol, "instances not an array");
}

// Stale copies travel with the layout; each must be a copy the layout has,
// named once, and some copy of every stripe must be left out.
TEST(LayoutCodec, StaleCopiesRoundTripAndAreChecked) {
  auto l = sample_layout();
  l.replicas = 2;
  EXPECT_FALSE(proto::layout_to_body(l).contains("stale"));
  l.stale = {{1, 1}, {0, 2}};  // copy 1 of server 0's stripes, copy 0 of server 2's
  EXPECT_EQ(proto::layout_from_body(proto::layout_to_body(l), "t").stale, l.stale);
  EXPECT_FALSE(proto::position_left_without_copy(l));
  auto both = l;
  both.stale.push_back({0, 0});  // server 0's stripes: copy 0 on server 0, copy 1 on server 1
  EXPECT_EQ(proto::position_left_without_copy(both), 0u);
  expect_rejected(proto::layout_to_body(both), Errc::protocol, "every copy of some stripes stale");
  auto b = proto::layout_to_body(l);
  for (const auto& bad : {proto::Body::array({proto::Body::array({2, 0})}), proto::Body::array({proto::Body::array({1, 3})}),
                          proto::Body::array({proto::Body::array({1})}), proto::Body::array({proto::Body::array({1, "x"})}),
                          proto::Body::array({proto::Body::array({1, 1}), proto::Body::array({1, 1})}), proto::Body(5)}) {
    b["stale"] = bad;
    expect_rejected(b, Errc::protocol, bad.dump().c_str());
  }
}

TEST(LayoutCodec, RoundTripsThroughMessagePack) {
  const auto l = sample_layout();
  const auto wire = proto::Body::to_msgpack(proto::layout_to_body(l));
  EXPECT_EQ(proto::layout_from_body(proto::decode_body(wire), "t").shares, l.shares);
}

TEST(LayoutCodec, RejectsStructuralDamage) {
  const auto good = proto::layout_to_body(sample_layout());
  expect_rejected(proto::Body::array(), Errc::protocol, "not a map");
  for (const char* field : {"name", "size", "stripe_unit", "servers", "shares"}) {
    auto b = good;
    b.erase(field);
    expect_rejected(b, Errc::protocol, field);
  }
  auto b = good;
  b["size"] = "big";
  expect_rejected(b, Errc::protocol, "size as string");
  b = good;
  b["servers"] = "127.0.0.1:7000";
  expect_rejected(b, Errc::protocol, "servers not an array");
  b = good;
  b["servers"].push_back("127.0.0.1:7002");
  expect_rejected(b, Errc::protocol, "more servers than shares");
  b = good;
  b["servers"] = proto::Body::array();
  b["shares"] = proto::Body::array();
  expect_rejected(b, Errc::protocol, "no servers");
  b = good;
  b["servers"][1] = 7001;
  expect_rejected(b, Errc::protocol, "server as number");
  b = good;
  b["shares"][1] = -5;
  expect_rejected(b, Errc::protocol, "negative share");
}

TEST(LayoutCodec, RejectsGeometryThatDoesNotAddUp) {
  const auto good = proto::layout_to_body(sample_layout());
  auto b = good;
  b["size"] = 0;
  expect_rejected(b, Errc::protocol, "zero size");
  b = good;
  b["stripe_unit"] = 0;
  expect_rejected(b, Errc::protocol, "zero stripe unit");
  b = good;
  b["shares"][0] = b["shares"][0].get<std::uint64_t>() + 4096;
  expect_rejected(b, Errc::protocol, "share larger than the geometry gives");
  b = good;
  b["size"] = good["size"].get<std::uint64_t>() + 1;
  expect_rejected(b, Errc::protocol, "size that does not match the shares");
}

TEST(LayoutCodec, RejectsTooManyServers) {
  smb::Layout l{"big", proto::kMaxServersPerBuffer + 1, 8, {}, {}, {}, 1, {}};
  proto::StripeGeometry g{l.size, 8, static_cast<std::uint32_t>(proto::kMaxServersPerBuffer + 1)};
  for (std::uint32_t i = 0; i < g.servers; ++i) {
    l.servers.push_back("10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1) + ":7000");
    l.shares.push_back(g.share(i));
  }
  expect_rejected(proto::layout_to_body(l), Errc::protocol, "4097 servers");
}

TEST(LayoutCodec, RejectsBadNamesAndAddresses) {
  auto b = proto::layout_to_body(sample_layout());
  b["name"] = "no spaces allowed";
  expect_rejected(b, Errc::invalid_argument, "bad name");
  b = proto::layout_to_body(sample_layout());
  b["servers"][2] = "no-port-here";
  expect_rejected(b, Errc::invalid_argument, "address without port");
  b["servers"][2] = "host:99999";
  expect_rejected(b, Errc::invalid_argument, "port out of range");
}

TEST(LayoutCodec, HomeServerIsStableAndInRange) {
  const std::vector<std::string> servers = {"a:1", "b:2", "c:3"};
  EXPECT_EQ(proto::home_server_index("x", {}), 0u);
  EXPECT_EQ(proto::home_server_index("weights", servers), proto::home_server_index("weights", servers));
  std::vector<int> hits(servers.size());
  for (int i = 0; i < 3000; ++i) {
    const auto home = proto::home_server_index("buffer-" + std::to_string(i), servers);
    ASSERT_LT(home, servers.size());
    hits[home] += 1;
  }
  for (std::size_t i = 0; i < hits.size(); ++i)
    EXPECT_GT(hits[i], 800) << "names should spread over all home servers; server " << i << " got " << hits[i];
}

// Layouts are checked as the client builds them: a stripe unit that is a
// multiple of 8, shares a server could hold, distinct servers.
TEST(LayoutCodec, RejectsLayoutsNoClientBuilds) {
  auto with = [](std::uint64_t size, std::uint64_t unit, std::vector<std::string> servers) {
    smb::Layout l{"forged", size, unit, std::move(servers), {}, {}, 1, {}};
    const proto::StripeGeometry g{size, unit, static_cast<std::uint32_t>(l.servers.size())};
    for (std::uint32_t i = 0; i < g.servers; ++i) l.shares.push_back(g.share(i));
    return proto::layout_to_body(l);
  };
  expect_rejected(with(UINT64_MAX, 1, {"h:1"}), Errc::protocol, "16 EiB with a 1-byte stripe unit");
  expect_rejected(with(4096, 12, {"h:1"}), Errc::protocol, "stripe unit 12");
  expect_rejected(with(proto::kMaxServerCapacity * 2 + 8, 8, {"h:1", "h:2"}), Errc::protocol,
                  "more than two servers can lend");
  expect_rejected(with(16, 8, {"h:1", "h:1"}), Errc::protocol, "a server twice");
  expect_rejected(with(16, 8, {std::string(300, 'h') + ":1"}), Errc::invalid_argument, "a 300-character host");
  EXPECT_NO_THROW(proto::layout_from_body(with(proto::kMaxServerCapacity * 2, 8, {"h:1", "h:2"}), "t"));
}

}  // namespace
