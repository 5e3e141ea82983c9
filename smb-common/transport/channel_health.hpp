#pragma once
// A channel's failure state, kept the same way by every transport: the
// first failure wins and says what happened to which server; every op
// after it is refused with that reason. Not locked itself: each transport
// guards it with the lock that guards the channel's queues.
#include "transport/completion.hpp"

#include <optional>
#include <string>

namespace smb::transport {

class ChannelHealth {
 public:
  bool failed() const { return failed_; }
  // Records a failure; false if the channel had failed already (the first
  // reason stays).
  bool fail(std::string reason) {
    if (failed_) return false;
    failed_ = true;
    reason_ = std::move(reason);
    return true;
  }
  const std::string& reason() const { return reason_; }
  std::optional<std::string> failure() const {
    if (!failed_) return std::nullopt;
    return reason_;
  }
  // True if the channel may take `op`; else finishes `completion` with
  // server_gone and the reason.
  bool admit(const CompletionPtr& completion, const char* op) const {
    if (!failed_) return true;
    completion->finish(Errc::server_gone, reason_ + " (during " + op + ")");
    return false;
  }
  void throw_if_failed() const {
    if (failed_) throw Error(Errc::server_gone, reason_);
  }

 private:
  bool failed_ = false;
  std::string reason_;
};

}  // namespace smb::transport
