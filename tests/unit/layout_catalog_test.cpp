// The layout catalog (smb-server/layout_catalog.hpp), alone: a record is
// reserved, committed by its creator only, and counted against its
// creator's quota; one session repairs it at a time; a stale mark is
// refused where it would leave stripes with no good copy; a session's
// close drops its reservations and ends its repairs.
#include "expect_error.hpp"
#include "layout_catalog.hpp"

#include <gtest/gtest.h>

namespace smb::server {
namespace {

Layout two_copies(const std::string& name) {
  Layout layout;
  layout.name = name;
  layout.size = 3 * 4096;
  layout.stripe_unit = 4096;
  layout.servers = {"a:1", "b:1", "c:1"};
  layout.shares = {4096, 4096, 4096};
  layout.instances = {1, 2, 3};
  layout.replicas = 2;
  return layout;
}

using test::expect_errc;

TEST(LayoutCatalog, ARecordIsSeenOnceItsCreatorCommitsIt) {
  LayoutCatalog catalog;
  catalog.reserve_name(1, two_copies("w"));
  expect_errc(Errc::not_found, [&] { catalog.get_layout("w"); }, "still being created");
  expect_errc(Errc::already_exists, [&] { catalog.reserve_name(2, two_copies("w")); }, "a name taken");
  expect_errc(Errc::not_found, [&] { catalog.commit_layout(2, "w"); }, "only its creator commits");
  catalog.commit_layout(1, "w");
  EXPECT_EQ(catalog.get_layout("w").servers.size(), 3u);
  EXPECT_EQ(catalog.list_layouts("", 10).items.size(), 1u);
  catalog.abandon_name(1, "w");  // committed: abandoning no longer drops it
  EXPECT_TRUE(catalog.erase("w"));
  EXPECT_FALSE(catalog.erase("w"));
}

TEST(LayoutCatalog, QuotasCountWhatASessionCreatedUntilItCloses) {
  SessionQuotas quotas;
  quotas.layouts = 2;
  LayoutCatalog catalog(quotas);
  catalog.reserve_name(1, two_copies("a"));
  catalog.reserve_name(1, two_copies("b"));
  expect_errc(Errc::no_space, [&] { catalog.reserve_name(1, two_copies("c")); }, "a third record over a quota of two");
  catalog.reserve_name(2, two_copies("c"));  // another session's own quota
  catalog.commit_layout(1, "a");
  catalog.session_closed(1);  // its reservation of b goes; a stays, and counts no more
  EXPECT_NO_THROW(catalog.get_layout("a"));
  expect_errc(Errc::not_found, [&] { catalog.commit_layout(1, "b"); }, "a reservation its closed session left");
  catalog.reserve_name(3, two_copies("b"));
  EXPECT_TRUE(catalog.erase("a"));
}

TEST(LayoutCatalog, OneSessionRepairsARecordAtATime) {
  LayoutCatalog catalog;
  catalog.reserve_name(1, two_copies("w"));
  catalog.commit_layout(1, "w");
  catalog.begin_repair(2, "w");
  expect_errc(Errc::busy, [&] { catalog.begin_repair(3, "w"); }, "a second repairer");
  EXPECT_NO_THROW(catalog.check_repairer(2, "w"));
  expect_errc(Errc::invalid_argument, [&] { catalog.check_repairer(3, "w"); }, "a session that does not repair it");
  const std::vector<std::uint64_t> runs = {1, 9, 3};
  const std::vector<std::uint64_t> too_few = {1, 9};
  expect_errc(Errc::invalid_argument, [&] { catalog.end_repair(2, "w", &too_few, {}); }, "runs for two of three servers");
  catalog.end_repair(2, "w", &runs, {});
  EXPECT_EQ(catalog.get_layout("w").instances, runs);
  catalog.begin_repair(3, "w");  // free again
  catalog.session_closed(3);     // a repair that died ends unfinished
  EXPECT_NO_THROW(catalog.begin_repair(4, "w"));
}

TEST(LayoutCatalog, AStaleMarkNeverLeavesStripesWithoutAGoodCopy) {
  LayoutCatalog catalog;
  catalog.reserve_name(1, two_copies("w"));
  catalog.commit_layout(1, "w");
  const auto [layout, added] = catalog.mark_stale("w", {1, 2});
  EXPECT_TRUE(added);
  EXPECT_EQ(layout.stale, (std::vector<CopyRef>{{1, 2}}));
  EXPECT_FALSE(catalog.mark_stale("w", {1, 2}).second) << "marked once";
  // Copy 1 on server 2 holds the stripes of server 1, whose copy 0 is the last good one.
  expect_errc(Errc::data_lost, [&] { catalog.mark_stale("w", {0, 1}); }, "the last good copy of some stripes");
  expect_errc(Errc::invalid_argument, [&] { catalog.mark_stale("w", {2, 0}); }, "no copy 2");
  catalog.begin_repair(5, "w");
  catalog.end_repair(5, "w", nullptr, {{1, 2}});
  EXPECT_TRUE(catalog.get_layout("w").stale.empty()) << "rebuilt: fresh again";
}

}  // namespace
}  // namespace smb::server
