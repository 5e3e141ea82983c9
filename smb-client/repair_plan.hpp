#pragma once
// A repair's plan (repair.cpp runs it): which copies of a replicated buffer
// to rebuild, on which server, from which copy. A pure function of the
// layout record and what a check of its servers found, so that the choice
// is tested alone (tests/unit/repair_plan_test.cpp), apart from the copying,
// pausing and committing that carry it out.
//
// A copy is rebuilt where its server restarted (its segment is gone: made
// anew) or where it is recorded stale on a live server (rebuilt in place).
// Its source is the first other copy of the same stripes that is present
// and not stale. A copy with no such source is left out; the repair's
// caller has already refused a layout with stripes left in no copy at all
// (ClientCore::check_copies_left).
#include <smb/client.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace smb::client {

// Copy `replica` on layout server `target`, from copy `source_replica` on
// server `source`, `length` bytes; `in_place` where the target's segment is
// still there (a stale copy), else it is made anew (a restarted server).
struct Rebuild {
  std::uint32_t replica = 0;
  std::size_t target = 0;
  std::uint32_t source_replica = 0;
  std::size_t source = 0;
  std::uint64_t length = 0;
  bool in_place = false;
  bool operator==(const Rebuild&) const = default;
};

struct RepairPlan {
  std::vector<Rebuild> rebuilds;         // the restarted servers' copies first, then the stale ones
  std::vector<std::size_t> restarted;    // servers whose new runs the record takes when the repair ends
  std::vector<CopyRef> fresh;            // stale copies rebuilt (in place or anew): no longer stale when it ends
};

// `states[i]`: what the check found of layout server i (ClientCore::check).
RepairPlan plan_repair(const Layout& layout, const std::vector<ShareState>& states);

// The record once the plan is carried out: its rebuilt stale copies are
// fresh again (the restarted servers' new runs are the caller's to set).
Layout after_repair(const Layout& layout, const RepairPlan& plan);

}  // namespace smb::client
