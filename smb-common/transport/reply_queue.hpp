#pragma once
// Call replies on their way back to clients, kept the same way by every
// transport's server.
//
// ReplyQueue: replies come from any thread (the handler answers from the
// worker pool or the io thread); the transport's own thread sends them.
//
// ReplyBacklog: one rule bounds what one client can make the server hold.
// An honest client has at most kCallCredits calls unanswered; a reply the
// transport has accepted but not yet delivered (waiting for a send slot,
// or handed to UCX and not completed) counts against its client until it
// is. A client with more than kMaxUndeliveredReplies does not take its
// replies (no receives posted, not progressing) or ignores its credits: the
// transport cuts it off (verbs: disconnects it; UCX: drops the replies
// beyond the bound) instead of queueing without bound.
#include "transport/transport.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

namespace smb::transport {

inline constexpr std::uint32_t kCallCredits = 16;  // calls a client may have unanswered, per server
inline constexpr std::size_t kMaxUndeliveredReplies = 4 * kCallCredits;

template <class Peer>  // how the transport names a client: a weak connection, an endpoint
class ReplyQueue {
 public:
  struct Reply {
    Peer peer;
    std::uint64_t token;
    Bytes frame;
  };
  // `wake` wakes the transport's thread (which then calls take()).
  explicit ReplyQueue(std::function<void()> wake) : wake_(std::move(wake)) {}

  // Any thread.
  void push(Peer peer, std::uint64_t token, Bytes frame) {
    {
      std::lock_guard lock(mutex_);
      replies_.push_back(Reply{std::move(peer), token, std::move(frame)});
      queued_.store(true, std::memory_order_release);
    }
    wake_();
  }
  // The transport's thread: everything queued so far, in order.
  // Called on every pass of a spinning loop: an empty queue costs one load,
  // not a lock.
  std::vector<Reply> take() {
    if (!queued_.load(std::memory_order_acquire)) return {};
    std::lock_guard lock(mutex_);
    queued_.store(false, std::memory_order_relaxed);
    return std::exchange(replies_, {});
  }

 private:
  std::function<void()> wake_;
  std::mutex mutex_;
  std::vector<Reply> replies_;
  std::atomic<bool> queued_{false};  // replies_ is not empty
};

// One client's undelivered replies (on the transport's thread).
class ReplyBacklog {
 public:
  // A reply is about to be held for the client; false when that would pass
  // the bound: cut the client off instead.
  bool admit() {
    if (undelivered_ >= kMaxUndeliveredReplies) return false;
    ++undelivered_;
    return true;
  }
  // A reply admitted earlier was delivered (or failed for good).
  void delivered() {
    if (undelivered_ > 0) --undelivered_;
  }
  std::size_t undelivered() const { return undelivered_; }

 private:
  std::size_t undelivered_ = 0;
};

}  // namespace smb::transport
