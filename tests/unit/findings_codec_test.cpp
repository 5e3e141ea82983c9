// Host findings on the wire (the diagnose reply): what a server sends comes
// back the same, and an answer that is not what findings_to_body makes is
// refused with a protocol error naming the reply, not trusted.
#include "host/findings_codec.hpp"

#include <smb/error.hpp>

#include <gtest/gtest.h>

namespace {

using smb::HostFinding;
using smb::host::findings_from_body;
using smb::host::findings_to_body;
using Body = smb::protocol::Body;

TEST(FindingsCodecTest, FindingsComeBackAsTheyWereSent) {
  const std::vector<HostFinding> sent{{HostFinding::Level::fail, "memlock", "limit 64 KiB", "ulimit -l unlimited"},
                                      {HostFinding::Level::ok, "open files", "limit 1024", ""},
                                      {HostFinding::Level::note, "huge pages", "none", "sysctl"},
                                      {HostFinding::Level::warn, "gid rxe0/1", "RoCE v1 only", "ip address add"}};
  const auto back = findings_from_body(findings_to_body(sent), "test");
  ASSERT_EQ(back.size(), sent.size());
  for (std::size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(back[i].level, sent[i].level);
    EXPECT_EQ(back[i].check, sent[i].check);
    EXPECT_EQ(back[i].detail, sent[i].detail);
    EXPECT_EQ(back[i].fix, sent[i].fix);
  }
}

TEST(FindingsCodecTest, AnythingElseIsRefusedNamingTheReply) {
  const Body good = {{"level", "ok"}, {"check", "c"}, {"detail", "d"}, {"fix", ""}};
  auto unknown_level = good;
  unknown_level["level"] = "fine";
  auto not_text = good;
  not_text["detail"] = 7;
  auto missing = good;
  missing.erase("fix");
  auto long_text = good;
  long_text["detail"] = std::string(5000, 'x');
  for (const auto& bad : {Body("not an array"), Body::array({1}), Body::array({unknown_level}),
                          Body::array({not_text}), Body::array({missing}), Body::array({long_text})}) {
    try {
      findings_from_body(bad, "diagnose reply of server h:1");
      ADD_FAILURE() << "accepted " << bad.dump().substr(0, 80);
    } catch (const smb::Error& e) {
      EXPECT_EQ(e.code(), smb::Errc::protocol) << e.what();
      EXPECT_NE(std::string(e.what()).find("diagnose reply of server h:1"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(findings_from_body(Body(std::vector<Body>(2000, good)), "x"), smb::Error) << "too many";
}

}  // namespace
