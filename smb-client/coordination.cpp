// Locks, barriers and buffer versions from the client's side. Locks and
// barriers live on the home server of their name (as layout records do), so
// every process finds them from the name alone; they wait on connections of
// their own (wait_connections.hpp); version reads and waits go
// to every server holding part of the buffer, as calls over the data path.
#include "client_core.hpp"
#include "server_calls.hpp"

#include "protocol/messages.hpp"
#include "util/parse.hpp"

#include <algorithm>

namespace smb {

using protocol::MessageType;

namespace {
// A buffer's version is the least of its servers' (each counts its own ops).
std::uint64_t least_of(const std::vector<std::uint64_t>& versions) {
  return versions.empty() ? 0 : *std::min_element(versions.begin(), versions.end());
}

std::uint64_t millis(std::chrono::milliseconds d) { return static_cast<std::uint64_t>(std::max<std::int64_t>(d.count(), 1)); }
}  // namespace

Lock ClientCore::lock(std::string_view name_view, const LockOptions& options) {
  const std::string name(name_view);
  protocol::validate_name(name);
  auto connection = link(home_of(name)).waits->acquire();
  auto reply = connection->call(MessageType::lock,
                                {{"name", name},
                                 {"offset", options.offset},
                                 {"length", options.length},
                                 {"lease_ms", millis(options.lease)},
                                 {"timeout_ms", millis(options.timeout)}},
                                options.timeout);
  auto state = std::make_shared<Lock::State>();
  state->client = shared_from_this();
  state->connection = std::move(connection);
  state->name = name;
  state->token = protocol::get_u64(reply, "token", "lock");
  return Lock(std::move(state));
}

// A call over the home server's data channel (about one round trip once all
// arrive), naming this client's control session there, whose close breaks
// the barrier for the other parties.
void ClientCore::barrier(std::string_view name_view, std::uint32_t parties, std::chrono::milliseconds timeout) {
  const std::string name(name_view);
  protocol::validate_name(name);
  auto& home = link(home_of(name));
  client::ServerCalls calls(
      shared_from_this(), [name] { return "barrier " + smb::util::quoted(name); }, timeout);
  calls.add_barrier_call(home, name, parties, timeout, home.control->session());
  calls.finish_versions();
}

std::uint64_t BufferCore::version() { return least_of(server_versions()); }

std::vector<std::uint64_t> BufferCore::server_versions() {
  client::ServerCalls calls(client_, [name = name_] { return "buffer '" + *name + "': version"; });
  for (std::uint32_t p = 0; p < server_count(); ++p)
    if (layout_.shares[p] != 0) {  // a server busy with an op answers when it ends, within the client's timeout
      const auto r = path_->version_copy(p, "version");
      calls.add_version_call(*link_at(replica_server(p, r)), protocol::VersionCallKind::get, segment_names_[r], 0,
                             client_->timeout());
    }
  return calls.finish_versions();
}

// Every server waits on its own part at once; the least version reached is the buffer's.
std::uint64_t BufferCore::wait_version(std::uint64_t version, std::chrono::milliseconds timeout) {
  client::ServerCalls calls(
      client_, [name = name_, version] { return "buffer '" + *name + "': wait for version " + std::to_string(version); },
      timeout);
  for (std::uint32_t p = 0; p < server_count(); ++p)
    if (layout_.shares[p] != 0) {
      const auto r = path_->version_copy(p, "wait for version");
      calls.add_version_call(*link_at(replica_server(p, r)), protocol::VersionCallKind::wait, segment_names_[r], version,
                             timeout);
    }
  return least_of(calls.finish_versions());
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

void Lock::unlock() {
  if (!state_) return;
  auto state = std::move(state_);
  state->connection->call(MessageType::unlock, {{"name", state->name}, {"token", state->token}});
}

}  // namespace smb
