#pragma once
// What one smbd holds, in two parts with a lock each:
//
//   SegmentStore   (segment_store.hpp)   segments, their memory and handles,
//                                        versions, vector ops; ordered ops
//                                        pass the replica-order gate
//                                        (replica_order.hpp)
//   LayoutCatalog  (layout_catalog.hpp)  the layout records this server
//                                        keeps, their repair ownership and
//                                        stale copies
//
// Lock order: none. No method holds one part's lock while it calls the
// other; what touches both (destroy, a session's close) takes each in turn.
// Each part charges its own per-client quotas.
#include "layout_catalog.hpp"
#include "segment_store.hpp"

namespace smb::server {

class Registry {
 public:
  Registry(MemoryPool& pool, transport::ServerTransport& transport, const SessionQuotas& quotas = {})
      : store_(pool, transport, quotas), catalog_(quotas) {}

  SegmentStore& store() { return store_; }
  const SegmentStore& store() const { return store_; }
  LayoutCatalog& catalog() { return catalog_; }
  const LayoutCatalog& catalog() const { return catalog_; }

  // Drops this server's segment and, on a keeper, the record; not_found
  // when neither is here.
  void destroy(const std::string& name);
  // A session closed: its handles, reservations and repairs go.
  void session_closed(SessionId session);

 private:
  SegmentStore store_;
  LayoutCatalog catalog_;
};

}  // namespace smb::server
