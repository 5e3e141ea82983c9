#include "peer_watch.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace smb::detail {

namespace {
LockOptions held_for_life() {
  LockOptions o;
  o.lease = std::chrono::hours(24);  // the most a server grants: released when this client goes
  o.timeout = std::chrono::seconds(60);
  return o;
}
LockOptions probe() {
  LockOptions o;
  o.lease = std::chrono::seconds(1);
  o.timeout = std::chrono::milliseconds(1);
  return o;
}
}  // namespace

PeerWatch::PeerWatch(Client& client, const EngineConfig& config) : client_(client), config_(config) {
  try {
    own_ = client.lock(lock_name(config.group, config.group_rank), held_for_life());
  } catch (const Error& e) {
    // The lock's home is a lost server (a replicated engine starts without
    // it): the others cannot watch this worker, and it still trains.
    if (e.code() != Errc::unreachable && e.code() != Errc::server_gone) throw;
    spdlog::warn("update engine '{}': no liveness lock ({}): other workers will not see this one die", config.name,
                 e.what());
  }
}

std::string PeerWatch::lock_name(std::uint32_t group, std::uint32_t rank) const {
  return config_.name + "/alive/" + std::to_string(group) + "/" + std::to_string(rank);
}

void PeerWatch::check(std::string_view what) {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_probe_) return;
  next_probe_ = now + kProbeEvery;
  for (std::uint32_t g = 0; g < config_.groups; ++g)
    for (std::uint32_t r = 0; r < config_.group_size; ++r) {
      if (g == config_.group && r == config_.group_rank) continue;
      Lock got;
      try {
        got = client_.lock(lock_name(g, r), probe());
      } catch (const Error& e) {
        // Held: that worker is alive. Or the lock's home server is lost
        // (replicated engines go on without it): no word on the worker.
        if (e.code() == Errc::timeout || e.code() == Errc::unreachable || e.code() == Errc::server_gone) continue;
        throw;
      }
      got.unlock();
      throw Error(Errc::unreachable, "update engine '" + config_.name + "': " + std::string(what) +
                                         ": the worker of group " +
                                         std::to_string(g) + ", rank " + std::to_string(r) +
                                         " died (its liveness lock came free); the exchange cannot complete");
    }
}

void PeerWatch::barrier(Client& client, const std::string& name, std::uint32_t parties, std::string_view what) {
  const auto deadline = std::chrono::steady_clock::now() + config_.timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    try {
      // A timed-out arrival is withdrawn by the server, so arriving again is safe.
      client.barrier(name, parties, std::max(std::chrono::milliseconds(1), std::min(left, kProbeEvery)));
      return;
    } catch (const Error& e) {
      if (e.code() != Errc::timeout || left <= kProbeEvery) throw;
    }
    next_probe_ = {};
    check(what);
  }
}

}  // namespace smb::detail
