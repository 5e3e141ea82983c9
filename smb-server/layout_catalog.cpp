#include "layout_catalog.hpp"

#include "protocol/credential.hpp"
#include "protocol/layout_codec.hpp"

#include <smb/error.hpp>

#include <algorithm>

namespace smb::server {

void LayoutCatalog::erase_record(std::map<std::string, Record>::iterator it) {
  if (auto usage = usage_.find(it->second.creator); usage != usage_.end()) {
    usage->second.layouts -= std::min<std::uint64_t>(usage->second.layouts, 1);
    usage->second.layout_bytes -= std::min(usage->second.layout_bytes, it->second.bytes);
  }
  records_.erase(it);
}

bool LayoutCatalog::erase(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto record = records_.find(name);
  if (record == records_.end()) return false;
  erase_record(record);
  return true;
}

void LayoutCatalog::reserve_name(SessionId session, const Layout& layout) {
  std::lock_guard lock(mutex_);
  if (records_.contains(layout.name))
    throw Error(Errc::already_exists, "buffer name '" + layout.name + "' is already taken");
  auto& usage = usage_[session];
  const std::uint64_t bytes = reply_cost(layout);
  if (usage.layouts >= quotas_.layouts) over_quota("layout records", usage.layouts, "--max-layouts-per-client");
  if (usage.layout_bytes + bytes > quotas_.layout_bytes)
    over_quota("bytes of layout records", usage.layout_bytes, "--max-layout-bytes-per-client");
  records_[layout.name] = Record{layout, false, session, session, bytes};
  usage.layouts += 1;
  usage.layout_bytes += bytes;
}

void LayoutCatalog::commit_layout(SessionId session, const std::string& name) {
  std::lock_guard lock(mutex_);
  auto it = records_.find(name);
  if (it == records_.end() || it->second.owner != session)
    throw Error(Errc::not_found, "no reservation of '" + name + "' by this client to commit");
  it->second.committed = true;
  it->second.owner = 0;
}

void LayoutCatalog::abandon_name(SessionId session, const std::string& name) {
  std::lock_guard lock(mutex_);
  auto it = records_.find(name);
  if (it != records_.end() && !it->second.committed && it->second.owner == session) erase_record(it);
}

Layout LayoutCatalog::get_layout(const std::string& name) const {
  std::lock_guard lock(mutex_);
  auto it = records_.find(name);
  if (it == records_.end()) throw Error(Errc::not_found, "no buffer named '" + name + "'");
  if (!it->second.committed)
    throw Error(Errc::not_found, "buffer '" + name + "' is still being created; retry");
  return it->second.layout;
}

Page<Layout> LayoutCatalog::list_layouts(const std::string& after, std::size_t limit, std::string_view scope) const {
  std::lock_guard lock(mutex_);
  return page_of<Layout>(
      records_, after, limit,
      [scope](const Record& r) { return r.committed && protocol::in_scope(r.layout.name, scope); },
      [](const Record& r) { return r.layout; });
}

Layout LayoutCatalog::begin_repair(SessionId session, const std::string& name) {
  std::lock_guard lock(mutex_);
  auto it = records_.find(name);
  if (it == records_.end() || !it->second.committed) throw Error(Errc::not_found, "no buffer named '" + name + "'");
  if (it->second.repairer != 0 && it->second.repairer != session)
    throw Error(Errc::busy, "buffer '" + name + "' is being repaired by another client");
  it->second.repairer = session;
  return it->second.layout;
}

void LayoutCatalog::end_repair(SessionId session, const std::string& name,
                               const std::vector<std::uint64_t>* instances, const std::vector<CopyRef>& fresh) {
  std::lock_guard lock(mutex_);
  auto it = records_.find(name);
  if (it == records_.end() || it->second.repairer != session)
    throw Error(Errc::not_found, "no repair of '" + name + "' by this client to end");
  auto& layout = it->second.layout;
  if (instances) {
    if (instances->size() != layout.servers.size())
      throw Error(Errc::invalid_argument, "end_repair of '" + name + "': " + std::to_string(instances->size()) +
                                              " instances for " + std::to_string(layout.servers.size()) +
                                              " servers");
    layout.instances = *instances;
  }
  std::erase_if(layout.stale, [&](const CopyRef& c) { return std::find(fresh.begin(), fresh.end(), c) != fresh.end(); });
  it->second.repairer = 0;
}

std::pair<Layout, bool> LayoutCatalog::mark_stale(const std::string& name, CopyRef copy) {
  std::lock_guard lock(mutex_);
  auto it = records_.find(name);
  if (it == records_.end() || !it->second.committed) throw Error(Errc::not_found, "no buffer named '" + name + "'");
  auto& layout = it->second.layout;
  if (copy.replica >= layout.replicas || copy.server >= layout.servers.size())
    throw Error(Errc::invalid_argument, "buffer '" + name + "' has no copy " + std::to_string(copy.replica) +
                                            " on server " + std::to_string(copy.server) + " of its layout");
  if (protocol::is_stale(layout, copy)) return {layout, false};
  layout.stale.push_back(copy);
  if (const auto position = protocol::position_left_without_copy(layout)) {
    layout.stale.pop_back();
    throw Error(Errc::data_lost, "buffer '" + name + "': copy " + std::to_string(copy.replica) + " on " +
                                     layout.servers[copy.server] + " is the last one of its stripes not already "
                                     "behind the others: the copies of the stripes of " +
                                     layout.servers[*position] + " have diverged");
  }
  return {layout, true};
}

void LayoutCatalog::check_repairer(SessionId session, const std::string& name) const {
  std::lock_guard lock(mutex_);
  auto it = records_.find(name);
  if (it == records_.end() || it->second.repairer != session)
    throw Error(Errc::invalid_argument, "buffer '" + name + "' is not being repaired by this client (begin_repair first)");
}

void LayoutCatalog::session_closed(SessionId session) {
  std::lock_guard lock(mutex_);
  for (auto it = records_.begin(); it != records_.end();) {
    if (it->second.repairer == session) it->second.repairer = 0;  // a repair that died ends unfinished
    if (!it->second.committed && it->second.owner == session)
      erase_record(it++);
    else
      ++it;
  }
  usage_.erase(session);  // what it created and left behind no longer counts
}

}  // namespace smb::server
