#pragma once
// Which workers of an update engine are alive, so that a wait on a dead one
// fails within seconds, naming it, instead of running into its timeout.
//
// Every worker holds a lock named <engine>/alive/<group>/<rank> for its
// engine's life; the servers release a lock when its client's connection
// closes, so a dead worker's lock comes free. A wait that needs other
// workers (the synchronous exchange's counters, the engine's barriers after
// initialize()) runs in short slices and, between them, probes the others'
// locks (at most every kProbeEvery): a lock it gets names a dead worker.
// A lock whose home server is lost says nothing either way (locks live on
// their name's home only), so a lost server never reads as a dead worker.
#include <smb/update_engine.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace smb::detail {

class PeerWatch {
 public:
  static constexpr std::chrono::milliseconds kProbeEvery{500};

  PeerWatch(Client& client, const EngineConfig& config);

  /// Throws Errc::unreachable naming the first dead worker among the
  /// others; probes at most every kProbeEvery (cheap to call in a loop).
  void check(std::string_view what);
  /// Client::barrier in slices of kProbeEvery, check()ing between them;
  /// Errc::timeout after `timeout` in all.
  void barrier(Client& client, const std::string& name, std::uint32_t parties, std::string_view what);

 private:
  std::string lock_name(std::uint32_t group, std::uint32_t rank) const;

  Client& client_;
  const EngineConfig& config_;
  Lock own_;
  std::chrono::steady_clock::time_point next_probe_{};
};

}  // namespace smb::detail
