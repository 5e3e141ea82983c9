#include "lock_restorer.hpp"

#include "client_core.hpp"
#include "keeper_lock.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace smb::client {

LockRestorer::~LockRestorer() {
  {
    std::lock_guard lock(shared_->mutex);
    shared_->stop = true;
  }
  shared_->wake.notify_all();
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id())
    thread_.detach();  // the last lock went on this thread: it ends by itself
  else
    thread_.join();
}

void LockRestorer::watch(const std::shared_ptr<Lock::State>& lock) {
  std::lock_guard guard(shared_->mutex);
  shared_->locks.push_back(lock);
  if (shared_->running) return;
  if (thread_.joinable()) thread_.join();  // it said it ends: it has, or is about to
  shared_->running = true;
  thread_ = std::thread(&LockRestorer::run, shared_);
}

void LockRestorer::run(std::shared_ptr<Shared> shared) {
  for (;;) {
    std::vector<std::shared_ptr<Lock::State>> live;
    {
      std::unique_lock lock(shared->mutex);
      shared->wake.wait_for(lock, kPoll, [&] { return shared->stop; });
      std::erase_if(shared->locks, [](const auto& weak) {
        const auto state = weak.lock();
        return !state || state->released;  // read unlocked: a stale false only costs a look
      });
      if (shared->stop || shared->locks.empty()) {
        shared->running = false;
        return;
      }
      for (const auto& weak : shared->locks)
        if (auto state = weak.lock()) live.push_back(std::move(state));
    }
    for (const auto& state : live) restore_where_lost(*state);
    // `live` may hold the last references (and with them the client's):
    // dropped here, outside the mutex.
  }
}

void LockRestorer::restore_where_lost(Lock::State& lock) {
  std::lock_guard guard(lock.mutex);
  if (lock.released) return;
  const auto now = std::chrono::steady_clock::now();
  if (!lock.lease_end || now >= *lock.lease_end) return;
  for (auto& hold : lock.holds) {
    if (hold.given_up || (hold.connection && !hold.connection->peer_closed())) continue;
    hold.connection.reset();  // its server closed it: the hold there went with it
    auto restored = ask_keeper(*lock.client, hold.keeper, lock_request(lock, KeeperAsk::restore, kRestoreWait), kRestoreWait);
    switch (restored.kind) {
      case Asked::granted:
        hold.connection = std::move(restored.connection);
        hold.token = restored.token;
        spdlog::info("lock '{}': hold restored at {}", lock.name, hold.keeper);
        break;
      case Asked::refused:  // another holder has the range there: exclusivity rests on the other keeper alone
        hold.given_up = true;
        spdlog::warn("lock '{}': cannot restore the hold at {} ({}); the other keeper alone keeps it exclusive",
                     lock.name, hold.keeper, restored.why);
        break;
      default:
        break;  // still gone: next time
    }
  }
}

}  // namespace smb::client
