#include "repair_job.hpp"

#include "protocol/layout_codec.hpp"
#include "util/parse.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <future>

namespace smb::client {

using protocol::Body;
using protocol::MessageType;

namespace {
// Passes that recopy what clients changed while the copy ran, before the
// pause; they stop early once a pass finds at most 1/16 of the bytes changed.
constexpr int kCatchUpPasses = 4;
constexpr std::uint64_t kSmallEnough = 16;
}  // namespace

RepairJob::RepairJob(ClientCore& core, std::string name)
    : core_(core), name_(std::move(name)), context_("repair buffer '" + name_ + "'") {
  protocol::validate_name(name_);
  report_.name = name_;
}

RepairReport RepairJob::run() {
  take_records();
  try {
    plan();
    if (!plan_.rebuilds.empty()) {
      // Every keeper taken: a client that held the buffer at any time since
      // held it at one of them, and the pause says whether anyone did.
      every_keeper_taken_ = taken_.size() == core_.keepers_of(name_).size();
      using Clock = std::chrono::steady_clock;
      const auto copying = Clock::now();
      bulk_copy();
      const auto copied = Clock::now();
      if (held_at_begin_ > 0) catch_up();  // nobody held it: nothing to catch up with yet
      const auto caught_up = Clock::now();
      final_pass(pause());
      const auto ms = [](auto from, auto to) { return std::chrono::duration<double, std::milli>(to - from).count(); };
      spdlog::debug("{}: before the copy {:.0f} ms, bulk copy {:.0f} ms, catch-up {:.0f} ms, pause and final pass "
                    "{:.0f} ms{}", context_, ms(started_, copying), ms(copying, copied), ms(copied, caught_up),
                    ms(caught_up, Clock::now()), untouched_ ? " (untouched: no digest pass)" : "");
    }
    commit();
  } catch (const Error& e) {
    abort();
    if (dynamic_cast<const UnpausedWriters*>(&e) != nullptr) throw UnpausedWriters(e.code(), context_ + ": " + e.what());
    throw Error(e.code(), context_ + ": " + e.what());
  }
  const auto ended = std::chrono::steady_clock::now();
  if (paused_at_) report_.paused_seconds = std::chrono::duration<double>(ended - *paused_at_).count();
  report_.seconds = std::chrono::duration<double>(ended - started_).count();
  if (!report_.repaired.empty())
    spdlog::debug("{}: {} copies rebuilt, {} in {:.2f} s ({} recopied, {} clients paused {:.3f} s)", context_,
                  report_.repaired.size(), util::format_bytes(report_.bytes), report_.seconds,
                  util::format_bytes(report_.recopied), report_.clients_paused, report_.paused_seconds);
  return report_;
}

// The record's keepers (the home, and the next server for a replicated
// buffer): every one that has it is taken for the repair; one reachable
// without it (it restarted) gets it back at the end.
void RepairJob::take_records() {
  const auto keepers = core_.keepers_of(name_);
  for (const auto& keeper : keepers) {
    try {
      core_.relink(keeper);  // one that restarted since this client last reached it
    } catch (const Error&) {
    }
  }
  auto [reply, first] = core_.ask_keepers(name_, MessageType::begin_repair, {{"name", name_}});
  layout_ = protocol::layout_from_body(reply["layout"], "begin_repair");
  taken_.push_back(&core_.link(first));
  held_at_begin_ = reply.value("holders", std::uint64_t{1});
  if (layout_.replicas <= 1) return;
  for (const auto& other : keepers) {
    if (other == first) continue;
    try {
      const auto their_reply = core_.link(other).control->call(MessageType::begin_repair, {{"name", name_}});
      const auto theirs = protocol::layout_from_body(their_reply["layout"], "begin_repair");
      taken_.push_back(&core_.link(other));
      held_at_begin_ = std::max(held_at_begin_, their_reply.value("holders", std::uint64_t{1}));
      for (const auto& copy : theirs.stale)  // a mark one keeper missed: rebuilt all the same
        if (!protocol::is_stale(layout_, copy)) layout_.stale.push_back(copy);
      if (take_newer_runs(theirs)) behind_.push_back(first);
      if (theirs.instances != layout_.instances) behind_.push_back(other);
    } catch (const Error& e) {
      if (e.code() == Errc::not_found) {
        missing_.push_back(other);
      } else if (!is_absence(e)) {
        try {
          end_repairs({{"name", name_}});
        } catch (const Error&) {
        }
        throw Error(e.code(), context_ + ": " + e.what());
      }
    }
  }
}

// The keepers' records differ where a repair ended while one of them was
// unreachable: where the other names a server's current run and ours does
// not, the other is newer there (runs change only to a server's current one).
bool RepairJob::take_newer_runs(const Layout& theirs) {
  bool changed = false;
  const auto n = layout_.servers.size();
  for (std::size_t i = 0; i < n && i < theirs.instances.size() && i < layout_.instances.size(); ++i) {
    if (theirs.instances[i] == layout_.instances[i]) continue;
    try {
      if (core_.link(layout_.servers[i]).instance != theirs.instances[i]) continue;
    } catch (const Error&) {
      continue;
    }
    layout_.instances[i] = theirs.instances[i];
    changed = true;
  }
  return changed;
}

void RepairJob::plan() {
  if (layout_.replicas == 1)
    throw Error(Errc::invalid_argument, "it has one copy: nothing to rebuild a lost share from (make buffers that "
                                        "must survive a server with replicas = 2)");
  core_.refresh_links(layout_, true);  // a server that restarted since this client last reached it
  const auto states = core_.check(layout_);
  const auto n = layout_.servers.size();
  std::vector<bool> present(n);
  for (std::size_t i = 0; i < n; ++i) {
    present[i] = states[i] == ShareState::ok;
    if (states[i] == ShareState::unreachable) report_.unreachable.push_back(layout_.servers[i]);
  }
  ClientCore::check_copies_left(layout_, present, context_);
  plan_ = plan_repair(layout_, states);
}

// f(job) for every copy at once: each copy has its own source (or its own
// target), so that a restarted server that lost copies of two positions
// pulls from both sources together, as a read reads every server at once.
// Every run has ended when this returns or throws.
void RepairJob::each_copy_at_once(const std::function<void(CopyJob&)>& f) {
  if (jobs_.size() == 1) return f(jobs_.front());
  std::vector<std::future<void>> runs;
  for (auto& job : jobs_) runs.push_back(std::async(std::launch::async, [&f, &job] { f(job); }));
  std::exception_ptr first;
  for (auto& run : runs) {
    try {
      run.get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void RepairJob::bulk_copy() {
  for (const auto& rebuild : plan_.rebuilds) {
    jobs_.push_back(prepare_copy(core_, layout_, rebuild, opened_, allocated_));
    report_.repaired.push_back({layout_.servers[rebuild.target], rebuild.replica, layout_.servers[rebuild.source],
                                rebuild.length});
  }
  for (auto& job : jobs_)
    for (const auto& other : jobs_)
      if (&other != &job && other.to == job.to) job.queued_before += other.length;
  quiet_ = quiet_segments(core_, name_, jobs_);  // before any byte is read: final_pass compares
  each_copy_at_once([this](CopyJob& job) { copy_ranges(core_, job, whole(job.length)); });
  for (const auto& job : jobs_) {
    report_.bytes += job.length;
    copied_ += job.length;
  }
}

std::uint64_t RepairJob::recopy() {
  std::vector<std::uint64_t> changed_in(jobs_.size());
  each_copy_at_once([&](CopyJob& job) {
    const auto ranges = differing(job);
    copy_ranges(core_, job, ranges);
    changed_in[static_cast<std::size_t>(&job - jobs_.data())] = total(ranges);
  });
  std::uint64_t changed = 0;
  for (const auto c : changed_in) changed += c;
  report_.bytes += changed;
  report_.recopied += changed;
  return changed;
}

// Clients wrote the sources meanwhile: recopy what changed until little does.
void RepairJob::catch_up() {
  for (int pass = 0; pass < kCatchUpPasses; ++pass)
    if (recopy() <= copied_ / kSmallEnough) break;
}

// Every client that holds the buffer, paused (each holds it at every keeper
// it reached: the most any keeper counts).
std::set<std::uint64_t> RepairJob::pause() {
  paused_at_ = std::chrono::steady_clock::now();
  const auto pause_limit = core_.timeout() + std::chrono::seconds(5);
  std::set<std::uint64_t> paused;
  untouched_ = every_keeper_taken_;
  for (auto* keeper : taken_) {
    auto reply = keeper->control->call(
        MessageType::pause_holders, {{"name", name_}, {"timeout_ms", static_cast<std::uint64_t>(pause_limit.count())}},
        pause_limit);
    const auto holders = protocol::get_u64(reply, "holders", "pause_holders");
    report_.clients_paused = std::max(report_.clients_paused, holders);
    untouched_ = untouched_ && holders == 0 && reply.value("untouched", false);
    for (const auto& id : reply.value("clients", Body::array()))
      if (id.is_number_unsigned()) paused.insert(id.get<std::uint64_t>());
  }
  return paused;
}

void RepairJob::final_pass(const std::set<std::uint64_t>& paused) {
  // Nobody can have written the copied segments since the bulk copy began
  // where every keeper says nobody held the buffer since (pause()), or where
  // their own servers say nobody but this repair had them open before it and
  // nobody opened them since (a keeper that restarted cannot say; a client
  // writes only segments it opened). The bulk copy is then the source's
  // bytes, and a digest pass would find nothing.
  if (check_sources(core_, name_, jobs_, paused, quiet_)) untouched_ = true;
  if (!untouched_) recopy();
  for (auto& job : jobs_) {
    const auto version = protocol::get_u64(
        job.from->control->call(MessageType::get_version, {{"name", job.source_name}}), "version", "get_version");
    job.to->control->call(MessageType::set_version, {{"name", job.target_name}, {"version", version}});
  }
  for (std::size_t i = 0; i < jobs_.size(); ++i) report_.repaired[i].server_to_server = jobs_[i].server_to_server;
}

void RepairJob::commit() {
  release(false);
  opened_.clear();
  Body end{{"name", name_}};
  const bool rebuilt = !plan_.rebuilds.empty();
  auto repaired = after_repair(layout_, plan_);
  if (rebuilt)
    for (const auto x : plan_.restarted) repaired.instances[x] = core_.link(layout_.servers[x]).instance;
  if (rebuilt || !behind_.empty()) end["instances"] = repaired.instances;
  Body fresh = Body::array();  // the stale copies among them are fresh again
  for (const auto& copy : plan_.fresh) fresh.push_back({copy.replica, copy.server});
  if (!fresh.empty()) end["fresh"] = std::move(fresh);
  end_repairs(end);  // the paused clients go on, with the rebuilt copies
  report_.records_restored = behind_;
  restore_records(repaired);
}

void RepairJob::abort() noexcept {
  release(true);
  try {
    end_repairs({{"name", name_}});
  } catch (const Error&) {
    // Our session's end releases the record (and the paused clients) too.
  }
}

// Once one keeper recorded the new runs the rebuilt copies are in use: a
// keeper that fails then is said and left behind (the next repair brings it
// up to date); only when none did does the repair fail.
void RepairJob::end_repairs(const Body& end) {
  std::optional<Error> failure;
  std::size_t ended = 0;
  for (auto* keeper : taken_) {
    try {
      keeper->control->call(MessageType::end_repair, end);
      ++ended;
    } catch (const Error& e) {
      spdlog::warn("{}: ending it on {}: {}", context_, keeper->control->peer(), e.what());
      if (!failure) failure = e;
    }
  }
  if (ended == 0 && failure) throw *failure;
}

void RepairJob::release(bool destroy_allocated) noexcept {
  jobs_.clear();
  for (const auto& [server, segment] : opened_) {
    try {
      core_.link(server).control->call(MessageType::close_segment, {{"name", segment}});
    } catch (const Error&) {
    }
  }
  if (!destroy_allocated) return;
  for (const auto& [server, segment] : allocated_) {
    try {
      core_.link(server).control->call(MessageType::destroy, {{"name", segment}});
    } catch (const Error&) {
    }
  }
}

// Writes the record back to keepers that restarted without it; one that
// fails is said and left for the next repair (the record is kept by the
// other keeper meanwhile). A copy that a client recorded stale meanwhile
// reached only the keeper we hold (the one written back to had no record
// to mark): such marks are copied over once the record is there, after
// which every mark reaches both.
void RepairJob::restore_records(const Layout& repaired) {
  ServerLink& current = *taken_.front();
  for (const auto& keeper : missing_) {
    ServerLink* l = nullptr;
    try {
      l = &core_.link(keeper);
      l->control->call(MessageType::reserve_name,
                       {{"name", repaired.name}, {"layout", protocol::layout_to_body(repaired)}});
      l->control->call(MessageType::commit_layout, {{"name", repaired.name}});
      report_.records_restored.push_back(keeper);
    } catch (const Error& e) {
      spdlog::warn("{}: its layout record could not be written back to {}: {}", context_, keeper, e.what());
      continue;
    }
    try {
      const auto now = protocol::layout_from_body(
          current.control->call(MessageType::get_layout, {{"name", repaired.name}})["layout"], "get_layout");
      for (const auto& copy : now.stale)
        if (!protocol::is_stale(repaired, copy))
          l->control->call(MessageType::mark_stale, ClientCore::stale_mark(repaired.name, copy,
                                                                           "recorded at the other keeper while "
                                                                           "this one had no record"));
    } catch (const Error& e) {
      spdlog::warn("{}: copies recorded stale meanwhile could not be copied to {}: {}", context_, keeper, e.what());
    }
  }
}

}  // namespace smb::client
