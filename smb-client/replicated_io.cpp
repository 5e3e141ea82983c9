// A replicated buffer's writes and reads (replicated_path.hpp says how
// they meet its copies).
#include "replicated_path.hpp"
#include "server_calls.hpp"

#include "protocol/messages.hpp"
#include "util/parse.hpp"

#include <map>

namespace smb::client {

namespace {

// One server's part of a replicated transfer: its pieces (index into the
// split, copy) and the request that moves them.
struct ServerShare {
  std::uint32_t server = 0;
  std::vector<std::pair<std::size_t, std::uint32_t>> pieces;
  std::shared_ptr<Request::State> state;
  enum class Outcome { running, done, lost } outcome = Outcome::running;
  std::string lost_why;
};

// Drives the shares that still run; false while one has not finished. A
// share whose server is gone (or does not answer in time) ends `lost`.
bool drive(std::vector<ServerShare>& shares, bool wait) {
  bool pending = false;
  for (auto& share : shares) {
    if (share.outcome != ServerShare::Outcome::running) continue;
    try {
      Request request(share.state);
      if (wait) {
        request.wait();
      } else if (!request.test()) {
        pending = true;
        continue;
      }
      share.outcome = ServerShare::Outcome::done;
    } catch (const Error& e) {
      if (!is_absence(e)) {
        // The request fails: no op of it may land in the caller's memory later.
        for (auto& other : shares)
          if (other.outcome == ServerShare::Outcome::running && !other.state->completion->done())
            other.state->client->transport().abandon(*other.state->completion);
        throw;
      }
      share.outcome = ServerShare::Outcome::lost;
      share.lost_why = e.what();
    }
  }
  return !pending;
}

// Moves each server's pieces in one request (`state` makes it, with the
// server's link); `issue(server, piece index, copy, completion)` starts one piece.
template <class MakeState, class Issue>
void start_shares(std::map<std::uint32_t, ServerShare>& by_server, std::vector<ServerShare>& into,
                  MakeState make_state, Issue issue) {
  for (auto& [server, share] : by_server) {
    share.server = server;
    share.state = make_state(server);
    share.state->completion->expect(static_cast<int>(share.pieces.size()));
    for (const auto& [i, r] : share.pieces) issue(server, i, r, share.state->completion);
    into.push_back(std::move(share));
  }
}

}  // namespace

Request ReplicatedPath::write(std::uint64_t offset, std::span<const std::byte> data) {
  const OpGate::Pass pass(buffer_.gate_);  // a repair's final copy waits for this write to land
  const auto split = buffer_.pieces(offset, data.size());
  std::map<std::uint32_t, ServerShare> by_server;
  for (std::size_t i = 0; i < split.size(); ++i) {
    bool placed = false;
    for (std::uint32_t r = 0; r < buffer_.replicas(); ++r) {
      const auto s = buffer_.replica_server(split[i].server, r);
      if (!takes_changes(r, s, "write")) continue;
      by_server[s].pieces.emplace_back(i, r);
      placed = true;
    }
    if (!placed) first_usable(split[i].server, "write");  // throws: no copy left
  }
  auto shares = std::make_shared<std::vector<ServerShare>>();
  start_shares(
      by_server, *shares, [&](std::uint32_t s) { return buffer_.new_state_on("write", offset, data.size(), s); },
      [&](std::uint32_t s, std::size_t i, std::uint32_t r, const transport::CompletionPtr& completion) {
        buffer_.link_at(s)->channel->put(*buffer_.segment(r, s), split[i].local_offset, data.data() + split[i].request_offset,
                                split[i].length, completion);
      });
  for (const auto& share : *shares) buffer_.gate_.track(share.state->completion, buffer_.link_at(share.server));
  auto state = buffer_.new_state("write", offset, data.size());
  // The request keeps this buffer's state (copies, links) while it runs.
  state->composite = [self = buffer_.shared_from_this(), path = this, shares, pieces = split.size(), name = buffer_.name_, offset, length = data.size()](bool wait) {
    if (!drive(*shares, wait)) return false;
    std::vector<bool> reached(pieces, false);
    std::string lost;
    for (const auto& share : *shares) {
      if (share.outcome == ServerShare::Outcome::done) {
        for (const auto& [i, r] : share.pieces) reached[i] = true;
        continue;
      }
      // A copy that missed a write must not serve it later: this client
      // leaves it, and records it for every client (its server may live).
      for (const auto& [i, r] : share.pieces)
        path->mark_stale(r, share.server, "a write to it failed: " + share.lost_why, self->alive(share.server));
      lost += (lost.empty() ? "" : "; ") + share.lost_why;
    }
    for (std::size_t i = 0; i < pieces; ++i)
      if (!reached[i])
        throw Error(Errc::server_gone,
                    describe_buffer_op(*name, "write", offset, length) + ": no copy of some of its bytes could be written: " + lost);
    return true;
  };
  return Request(state);
}

Request ReplicatedPath::read(std::uint64_t offset, std::span<std::byte> out) {
  struct Plan {
    std::vector<protocol::StripePiece> split;
    std::vector<ServerShare> shares;
    std::set<std::pair<std::uint32_t, std::uint32_t>> failed;  // (copy, server) that failed this read
  };
  auto plan = std::make_shared<Plan>();
  plan->split = buffer_.pieces(offset, out.size());
  // Reads pieces `which` from their first usable copy that has not failed this read.
  auto issue = [self = buffer_.shared_from_this(), this, plan, out, offset, length = out.size()](const std::vector<std::size_t>& which) {
    learn_after_losses();  // a later copy must not serve what it missed
    std::map<std::uint32_t, ServerShare> by_server;
    for (auto i : which) {
      const auto position = plan->split[i].server;
      std::optional<std::uint32_t> copy;
      const auto choose = [&] {
        for (std::uint32_t r = 0; r < buffer_.replicas() && !copy; ++r)
          if (!plan->failed.contains({r, buffer_.replica_server(position, r)}) && usable(r, buffer_.replica_server(position, r)))
            copy = r;
      };
      choose();
      // None left: a repair's end may be handing this buffer its rebuilt
      // copies right now (reads do not pass the gate, which stays closed
      // until they are adopted), so wait for that before giving up.
      if (!copy && buffer_.gate_.wait_for_reopening(std::chrono::steady_clock::now() + buffer_.client_->timeout())) choose();
      if (!copy)
        throw Error(Errc::server_gone, describe_buffer_op(buffer_.layout_.name, "read", offset, length) +
                                           ": no copy of the bytes at offset " +
                                           std::to_string(offset + plan->split[i].request_offset) + " can be read");
      by_server[buffer_.replica_server(position, *copy)].pieces.emplace_back(i, *copy);
    }
    start_shares(
        by_server, plan->shares, [&](std::uint32_t s) { return buffer_.new_state_on("read", offset, length, s); },
        [&](std::uint32_t s, std::size_t i, std::uint32_t r, const transport::CompletionPtr& completion) {
          const auto& p = plan->split[i];
          buffer_.link_at(s)->channel->get(*buffer_.segment(r, s), p.local_offset, out.data() + p.request_offset, p.length, completion);
        });
  };
  std::vector<std::size_t> all(plan->split.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  issue(all);
  auto state = buffer_.new_state("read", offset, out.size());
  state->composite = [plan, issue](bool wait) {
    for (;;) {
      if (!drive(plan->shares, wait)) return false;
      std::vector<std::size_t> again;
      for (auto& share : plan->shares) {
        if (share.outcome != ServerShare::Outcome::lost) continue;
        for (const auto& [i, r] : share.pieces) {
          plan->failed.insert({r, share.server});
          again.push_back(i);
        }
        share.outcome = ServerShare::Outcome::done;  // its pieces are read again below
      }
      if (again.empty()) return true;
      issue(again);
    }
  };
  return Request(state);
}

}  // namespace smb::client
