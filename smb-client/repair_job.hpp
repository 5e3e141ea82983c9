#pragma once
// Client::repair as a job in phases (docs/architecture.md, "Online repair,
// in sequence"; docs/reliability.md, "Repair"):
//
//   take_records  begin_repair at every keeper of the record: the record is
//                 this job's until it ends; their stale marks and newer
//                 runs are merged
//   plan          the servers checked; what to rebuild, where, from which
//                 copy (repair_plan.hpp: a pure function)
//   bulk_copy     each copy's segment made (or opened in place) and copied
//                 whole while clients go on writing the sources
//   catch_up      what clients changed meanwhile recopied, by digests,
//                 until little does
//   pause         every client that holds the buffer paused at the keepers;
//                 nobody unpaused may have a copied segment open
//   final_pass    what still differs recopied; each copy takes its source's
//                 version
//   commit        end_repair with the servers' new runs and the copies fresh
//                 again (the paused clients go on with them); the record
//                 written back to keepers that lost it
//
// A failure in any phase undoes what the job made and ends its repairs at
// the keepers (abort), so that the record is as it was.
#include "client_core.hpp"
#include "repair_copy.hpp"
#include "repair_plan.hpp"

#include <chrono>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace smb::client {

class RepairJob {
 public:
  RepairJob(ClientCore& core, std::string name);
  // The phases in order. Throws UnpausedWriters (having changed nothing)
  // where a client could not be paused yet: the caller tries again.
  RepairReport run();

 private:
  void take_records();
  void plan();
  void bulk_copy();
  void catch_up();
  std::set<std::uint64_t> pause();  // the paused clients' identities
  void final_pass(const std::set<std::uint64_t>& paused);
  void commit();
  void abort() noexcept;

  // Ends the repair at every keeper taken (with instances it commits it).
  void end_repairs(const protocol::Body& end);
  // Where another keeper's record names a server's current run and ours
  // does not, it is newer there; true when ours changed.
  bool take_newer_runs(const Layout& theirs);
  // Recopies what differs in every copy; returns the bytes recopied.
  std::uint64_t recopy();
  void each_copy_at_once(const std::function<void(CopyJob&)>& f);
  // Closes what the job opened, and destroys what it made when asked.
  void release(bool destroy_allocated) noexcept;
  // The record written back to the keepers that lost it.
  void restore_records(const Layout& repaired);

  ClientCore& core_;
  const std::string name_;
  const std::string context_;  // "repair buffer 'NAME'"
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  Layout layout_;
  std::vector<ServerLink*> taken_;    // the keepers whose record the job holds
  std::vector<std::string> missing_;  // keepers without the record
  std::vector<std::string> behind_;   // keepers whose record had older runs
  RepairPlan plan_;
  SegmentsAt opened_, allocated_;
  std::vector<CopyJob> jobs_;
  std::uint64_t copied_ = 0;  // bytes of the bulk copy
  std::uint64_t held_at_begin_ = 1;  // the most holders a keeper counted at begin_repair
  bool every_keeper_taken_ = false;
  bool untouched_ = false;  // nobody can have written the copied segments since the bulk copy began
  QuietSegments quiet_;     // the copied segments nobody else had open as the bulk copy began
  std::optional<std::chrono::steady_clock::time_point> paused_at_;
  RepairReport report_;
};

}  // namespace smb::client
