#pragma once
// How a test knows that a wait (a version wait, a barrier party, a queued
// lock request) has reached its server, instead of sleeping past it: the
// servers' stat says what waits there now (ServerStatus::waiting). And
// when a server's pool is whole (smbd faults it in after it answers), for
// tests that measure its memory from a baseline.
#include <smb/client.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

namespace smb::test {

// The waits on all of `client`'s servers together, summed.
inline ServerWaits waits_now(Client& client) {
  ServerWaits sum;
  for (const auto& s : client.status()) {
    sum.versions += s.waiting.versions;
    sum.barrier_parties += s.waiting.barrier_parties;
    sum.locks += s.waiting.locks;
  }
  return sum;
}

// Polls until the summed waits satisfy `reached` (within `within`).
inline testing::AssertionResult waits_reach(Client& client, const std::function<bool(const ServerWaits&)>& reached,
                                            std::chrono::milliseconds within = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  ServerWaits now = waits_now(client);
  while (!reached(now)) {
    if (std::chrono::steady_clock::now() > deadline)
      return testing::AssertionFailure() << "the servers still show " << now.versions << " version wait(s), "
                                         << now.barrier_parties << " barrier part(ies), " << now.locks
                                         << " queued lock request(s) after " << within.count() << " ms";
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    now = waits_now(client);
  }
  return testing::AssertionSuccess();
}

// Polls until every server of `client` has its whole pool in place.
inline testing::AssertionResult pools_in_place(Client& client,
                                               std::chrono::milliseconds within = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  for (;;) {
    std::string filling;
    for (const auto& s : client.status())
      if (s.reachable && s.populated < s.capacity)
        filling += " " + s.address + " (" + std::to_string(s.populated) + " of " + std::to_string(s.capacity) + ")";
    if (filling.empty()) return testing::AssertionSuccess();
    if (std::chrono::steady_clock::now() > deadline)
      return testing::AssertionFailure() << "pools still filling after " << within.count() << " ms:" << filling;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace smb::test
