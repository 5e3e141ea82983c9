// Locks held at every keeper of their name (docs/reliability.md, "Locks and
// barriers with two keepers"). A name is kept by its home and the next
// server (keepers_of). A lock is taken at each in that order, so that two
// clients never hold one keeper each and wait for the other; it is held
// while some keeper that was reached holds it, so one keeper's loss takes
// nothing from its holder, and nobody else is granted it at the keeper left.
//
// A keeper that has just started (restarted, or replaced) has lost its
// holds, and its holders restore them within its grace (lock_restorer.hpp).
// Meanwhile it answers with the grace left instead of granting: the lock is
// taken at the other keeper (waiting there no longer than the grace, after
// which the restarted keeper knows every hold again), then restored at the
// restarted one. Where every keeper reached has just started there is no
// hold left anywhere to restore, and they grant as usual.
#include "client_core.hpp"
#include "keeper_lock.hpp"

#include "protocol/messages.hpp"
#include "util/parse.hpp"

#include <algorithm>
#include <optional>
#include <thread>

namespace smb {

using protocol::MessageType;

namespace client {

namespace {
std::uint64_t millis(std::chrono::milliseconds d) {
  return static_cast<std::uint64_t>(std::max<std::int64_t>(d.count(), 1));
}
// A wait at the other keeper ends this long before a restarted keeper's
// grace does, so that the restore that follows arrives within it.
constexpr std::chrono::milliseconds kGraceMargin{250};
}  // namespace

protocol::Body lock_request(const Lock::State& lock, KeeperAsk ask, std::chrono::milliseconds timeout) {
  const auto lease = lock.lease_end ? std::chrono::ceil<std::chrono::milliseconds>(*lock.lease_end -
                                                                                  std::chrono::steady_clock::now())
                                    : lock.lease;
  protocol::Body request{{"name", lock.name},
                         {"offset", lock.offset},
                         {"length", lock.length},
                         {"lease_ms", millis(lease)},
                         {"timeout_ms", millis(timeout)}};
  if (ask == KeeperAsk::settled_only) request["settled_only"] = true;
  if (ask == KeeperAsk::restore) request["restore"] = true;
  return request;
}

// Releases what `lock` holds at every keeper. A keeper that is gone holds
// nothing; the first refusal (not_found: the lease ran out) is returned.
std::optional<Error> release_holds(Lock::State& lock) {
  std::optional<Error> refused;
  for (auto& hold : lock.holds) {
    if (!hold.connection) continue;
    try {
      hold.connection->call(MessageType::unlock, {{"name", lock.name}, {"token", hold.token}});
    } catch (const Error& e) {
      if (!is_absence(e) && !refused) refused = e;
    }
    hold.connection.reset();
  }
  lock.lease_end.reset();
  return refused;
}

Asked ask_keeper(ClientCore& core, const std::string& keeper, const protocol::Body& request,
                 std::chrono::milliseconds wait) {
  try {
    auto connection = core.relink(keeper).waits->acquire();
    const auto reply = connection->call(MessageType::lock, request, wait);
    if (reply.contains("grace_ms"))
      return {Asked::grace, 0, std::chrono::milliseconds(protocol::get_u64(reply, "grace_ms", "lock")), nullptr, {}};
    return {Asked::granted, protocol::get_u64(reply, "token", "lock"), {}, std::move(connection), {}};
  } catch (const Error& e) {
    if (e.code() == Errc::unreachable || e.code() == Errc::server_gone) return {Asked::absent, 0, {}, nullptr, e.what()};
    if (e.code() == Errc::busy && request.contains("restore")) return {Asked::refused, 0, {}, nullptr, e.what()};
    throw;
  }
}

namespace {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds until(Clock::time_point t) {
  return std::chrono::ceil<std::chrono::milliseconds>(t - Clock::now());
}

void hold_at(Lock::State& lock, Lock::State::Hold& hold, Asked& granted) {
  hold.connection = std::move(granted.connection);
  hold.token = granted.token;
  if (!lock.lease_end) lock.lease_end = Clock::now() + lock.lease;
}

bool held_anywhere(const Lock::State& lock) {
  return std::any_of(lock.holds.begin(), lock.holds.end(), [](const auto& h) { return h.connection != nullptr; });
}

enum class Round { held, again };

// One pass over the keepers in order (the header comment).
Round take_at_keepers(ClientCore& core, Lock::State& lock, Clock::time_point deadline) {
  std::vector<Lock::State::Hold*> in_grace;
  std::optional<Clock::time_point> grace_ends;  // the earliest, less the margin
  std::vector<std::string> absent;
  for (auto& hold : lock.holds) {
    auto wait = until(deadline);
    if (grace_ends) wait = std::min(wait, until(*grace_ends));
    if (wait.count() <= 0) {
      if (!grace_ends || Clock::now() >= deadline)
        throw Error(Errc::timeout, "lock " + util::quoted(lock.name) + " was not granted in time");
      return Round::again;
    }
    Asked asked;
    try {
      asked = ask_keeper(core, hold.keeper, lock_request(lock, KeeperAsk::settled_only, wait), wait);
    } catch (const Error& e) {
      if (e.code() == Errc::timeout && grace_ends && Clock::now() < deadline) return Round::again;
      throw;
    }
    switch (asked.kind) {
      case Asked::granted:
        hold_at(lock, hold, asked);
        break;
      case Asked::grace: {
        in_grace.push_back(&hold);
        const auto ends = Clock::now() + asked.grace_left - kGraceMargin;
        grace_ends = grace_ends ? std::min(*grace_ends, ends) : ends;
        break;
      }
      default:
        absent.push_back(hold.keeper + ": " + asked.why);
    }
  }
  const bool held = held_anywhere(lock);
  if (!held && in_grace.empty()) {
    std::string why;
    for (const auto& a : absent) why += (why.empty() ? "" : "; ") + a;
    throw Error(Errc::unreachable, "lock " + util::quoted(lock.name) + ": no keeper of the name can be reached (" + why + ")");
  }
  for (auto* hold : in_grace) {
    // Held elsewhere: restore here. None held: every keeper reached has just
    // started, and none keeps a hold to restore.
    const auto ask = held ? KeeperAsk::restore : KeeperAsk::any;
    const auto wait = held ? kRestoreWait : std::max(until(deadline), std::chrono::milliseconds(1));
    auto asked = ask_keeper(core, hold->keeper, lock_request(lock, ask, wait), wait);
    if (asked.kind == Asked::granted) {
      hold_at(lock, *hold, asked);
    } else if (asked.kind == Asked::refused) {
      return Round::again;  // its grace ended meanwhile and someone took it there: queue in order
    }
  }
  if (!held_anywhere(lock))
    throw Error(Errc::unreachable, "lock " + util::quoted(lock.name) + ": every keeper of the name was lost while it was being taken");
  return Round::held;
}

}  // namespace
}  // namespace client

Lock ClientCore::lock(std::string_view name_view, const LockOptions& options) {
  const std::string name(name_view);
  protocol::validate_name(name);
  const auto deadline = client::Clock::now() + options.timeout;
  auto state = std::make_shared<Lock::State>();
  state->client = shared_from_this();
  state->name = name;
  state->offset = options.offset;
  state->length = options.length;
  state->lease = options.lease;
  for (const auto& keeper : keepers_of(name)) state->holds.push_back({keeper, nullptr, 0, false});
  try {
    if (state->holds.size() == 1) {  // one server: its grace protects nothing
      const auto wait = options.timeout;
      auto asked = client::ask_keeper(*this, state->holds[0].keeper,
                                      client::lock_request(*state, client::KeeperAsk::any, wait), wait);
      if (asked.kind != client::Asked::granted) throw Error(Errc::unreachable, "lock " + util::quoted(name) + ": " + asked.why);
      client::hold_at(*state, state->holds[0], asked);
      return Lock(std::move(state));
    }
    while (client::take_at_keepers(*this, *state, deadline) == client::Round::again) {
      client::release_holds(*state);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (const Error&) {
    client::release_holds(*state);
    throw;
  }
  lock_restorer_.watch(state);
  return Lock(std::move(state));
}

// ---------------------------------------------------------------- Lock

Lock::~Lock() {
  try {
    unlock();
  } catch (const Error&) {
    // an expired lease or a gone server: nothing left to release
  }
}

Lock& Lock::operator=(Lock&& other) noexcept {
  if (this != &other) {
    try {
      unlock();
    } catch (const Error&) {
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

// Released at every keeper that holds it; the first refusal is thrown once
// every keeper has been told.
void Lock::unlock() {
  if (!state_) return;
  auto state = std::move(state_);
  std::lock_guard guard(state->mutex);
  state->released = true;
  if (auto refused = client::release_holds(*state)) throw *refused;
}

}  // namespace smb
