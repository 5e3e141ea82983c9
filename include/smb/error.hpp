#pragma once
/// @file
/// Errors raised by libsmb. Every message names the server, the buffer and the
/// operation involved, so that a user can tell what failed without a debugger.
#include <stdexcept>
#include <string>

namespace smb {

enum class Errc : int {
  ok = 0,
  invalid_argument = 1,   ///< bad size, offset, alignment, name, option
  out_of_range = 2,       ///< offset/size beyond the buffer
  not_found = 3,          ///< unknown buffer name
  already_exists = 4,     ///< name already taken
  no_space = 5,           ///< a server has not enough free memory
  unreachable = 6,        ///< cannot connect to a server
  server_gone = 7,        ///< a connected server went away
  timeout = 8,            ///< a wait ran past its deadline
  protocol = 9,           ///< malformed or unexpected message
  transport = 10,         ///< the transport (UCX, verbs) reported a failure
  internal = 11,
  data_lost = 12,         ///< a server restarted empty: its stripes of a buffer are gone
  permission_denied = 13, ///< the server wants a shared secret this client lacks or got wrong
  busy = 14,              ///< being repaired by another client, or a holder did not pause for a repair
  /// A replica's copy of an op cannot take its place in the copy's order
  /// (the place is taken, or the copy fell behind its primary); libsmb marks
  /// that copy stale, a caller of the public API never sees it.
  out_of_order = 15,
};

/// The highest code: one above it from the wire is a code this build does not know.
inline constexpr Errc kLastErrc = Errc::out_of_order;

const char* errc_name(Errc code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(Errc code, const std::string& what) : std::runtime_error(what), code_(code) {}
  Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

}  // namespace smb
