#pragma once
// The layout catalog: the records of the buffers this server keeps (as their
// home, or the next server of a replicated buffer's: the keepers), each
// reserved, then committed, by the client that creates it; which session
// repairs a record now; and which copies are recorded stale (Layout::stale).
// Its own mutex, taken alone (Registry, registry.hpp, says the order).
// Tested alone: tests/unit/layout_catalog_test.cpp.
#include "limits.hpp"
#include "listing_pages.hpp"

#include <smb/client.hpp>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace smb::server {

using SessionId = std::uint64_t;

class LayoutCatalog {
 public:
  explicit LayoutCatalog(const SessionQuotas& quotas = {}) : quotas_(quotas) {}

  // already_exists if taken; no_space over the session's quotas.
  void reserve_name(SessionId session, const Layout& layout);
  void commit_layout(SessionId session, const std::string& name);
  void abandon_name(SessionId session, const std::string& name);
  Layout get_layout(const std::string& name) const;
  // A page of the committed layouts, those whose names start with `scope` only.
  Page<Layout> list_layouts(const std::string& after, std::size_t limit, std::string_view scope = {}) const;
  // Drops the record; false when there is none.
  bool erase(const std::string& name);

  // Repair (smbctl repair): marks the record as being repaired by `session`
  // until end_repair or until the session closes (clients go on meanwhile:
  // repair_pauses.hpp). Throws busy when another session repairs it.
  Layout begin_repair(SessionId session, const std::string& name);
  // Ends `session`'s repair; with `instances`, the record's servers' runs
  // become those (the repaired copies are held there now); the copies in
  // `fresh` were rebuilt and are no longer stale.
  void end_repair(SessionId session, const std::string& name, const std::vector<std::uint64_t>* instances,
                  const std::vector<CopyRef>& fresh);
  // Throws unless `session` repairs `name` now (begin_repair).
  void check_repairer(SessionId session, const std::string& name) const;
  // Records that a copy fell behind the others (a client missed it with a
  // write or a vector op while its server lived): no client reads it until
  // a repair rebuilds it. Refused with data_lost where no other copy of its
  // stripes is left. Returns the record as it is now, and whether the copy
  // was not stale before.
  std::pair<Layout, bool> mark_stale(const std::string& name, CopyRef copy);

  // A session's reservations go, its repairs end unfinished, and what it
  // created stops counting against it.
  void session_closed(SessionId session);

 private:
  struct Record {
    Layout layout;
    bool committed = false;
    SessionId owner = 0;    // the creator, until it commits
    SessionId creator = 0;  // counts against this session's quota while it lasts
    std::uint64_t bytes = 0;
    SessionId repairer = 0;  // the session repairing it (begin_repair), or 0
  };
  struct Usage {
    std::uint64_t layouts = 0;
    std::uint64_t layout_bytes = 0;
  };
  // Under mutex_.
  void erase_record(std::map<std::string, Record>::iterator it);

  const SessionQuotas quotas_;
  mutable std::mutex mutex_;
  std::map<std::string, Record> records_;
  std::map<SessionId, Usage> usage_;
};

}  // namespace smb::server
