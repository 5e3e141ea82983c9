#include "client_core.hpp"

#include "transport/client_idle.hpp"

namespace smb {

bool Request::test() {
  if (!state_) throw Error(Errc::invalid_argument, "test() on an empty smb::Request");
  if (state_->composite) return state_->composite(false);
  if (!state_->completion->done()) state_->client->transport().progress();
  if (!state_->completion->done()) return false;
  try {
    state_->completion->throw_if_failed();
  } catch (const Error& e) {
    throw Error(e.code(), state_->describe() + ": " + e.what());
  }
  return true;
}

void Request::wait() {
  if (!state_) throw Error(Errc::invalid_argument, "wait() on an empty smb::Request");
  if (state_->composite) {
    state_->composite(true);
    return;
  }
  if (test()) return;  // most small ops: done when issued
  const transport::PollingThread polling;  // how long progress() polls before yielding
  while (!test()) {
    for (auto* link : state_->links) {
      link->check_alive();
      if (auto failure = link->channel->failure()) {
        state_->client->transport().abandon(*state_->completion);
        throw Error(Errc::server_gone, state_->describe() + ": " + *failure);
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (!state_->deadline) state_->deadline = now + state_->client->timeout();
    if (now > *state_->deadline) {
      // What each server's connection was doing, before abandoning changes it.
      std::string stalled;
      for (auto* link : state_->links) stalled += "; " + link->address + ": " + link->channel->stall_report();
      state_->client->transport().abandon(*state_->completion);
      throw Error(Errc::timeout, state_->describe() + ": not completed within " +
                                     std::to_string(state_->client->timeout().count()) +
                                     " ms (a server is unresponsive or gone)" + stalled);
    }
  }
}

}  // namespace smb
