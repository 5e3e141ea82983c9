#pragma once
/// @file
/// libsmb: the client of the Soft Memory Box fabric.
///
/// A Client connects to a set of smbd memory servers. A Buffer is a named
/// shared region striped over those servers (stripe i lives on server
/// i mod N), reachable from any process that knows the name.
///
/// Visibility: a write is visible to every other client once write() returns,
/// or once the Request returned by write_async() has completed (wait() or
/// test() returned true). Reads issued after that see the data. Two writes
/// to overlapping bytes that are in flight at the same time land in no
/// defined order; atomics on one 8-byte word are atomic across all clients.
#include <smb/error.hpp>
#include <smb/host_checks.hpp>
#include <smb/vector_ops.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace smb {

struct ClientOptions {
  /// "host:port" of every memory server. Empty: read SMB_SERVERS.
  std::vector<std::string> servers;
  /// Upper bound on any single wait (connect, control reply, data op).
  std::chrono::milliseconds timeout{std::chrono::seconds(15)};
  /// Transport name, one of SMB_TRANSPORTS (smb/config.h); empty: SMB_TRANSPORT or "ucx".
  std::string transport;
  /// Settings of that transport as key -> value, e.g. {"protocol", "am"} for
  /// UCX's data protocol (docs/architecture.md, "The transport abstraction"); a key the transport
  /// does not know is an error.
  std::map<std::string, std::string> transport_options;
  /// A server that cannot be reached (down, killed) is recorded, not fatal:
  /// see Client::unreachable_servers(); a replicated buffer opens and works
  /// from its other copies, and calls that need that server fail at once
  /// with Errc::unreachable naming it (it is tried again a second later).
  /// false (default): the constructor still fails when *no* server can be
  /// reached (and logs a warning naming each one that cannot). true: it
  /// does not fail even then, so that tools can report a fabric that is
  /// down (smbctl).
  bool tolerate_unreachable = false;
  /// File holding the shared secret of servers run with --auth-token-file
  /// (proved by challenge-response, never sent), or a credential for one
  /// name prefix (make_credential). Empty: SMB_AUTH_TOKEN_FILE, if set; else
  /// no secret.
  std::string auth_token_file;
};

struct BufferOptions {
  std::uint64_t stripe_unit = 1u << 20;  ///< bytes per stripe, multiple of 8
  /// Servers to stripe over, as "host:port"; empty: all of the client's.
  std::vector<std::string> servers;
  /// Copies of each stripe, each on a different server (1 to
  /// min(servers, kMaxReplicas)): writes go to every copy, reads fail over,
  /// vector ops and atomics apply on every copy in one order, so that the
  /// buffer survives the loss of replicas - 1 servers (docs/reliability.md).
  std::uint32_t replicas = 1;
};

/// The most copies of a buffer's stripes (BufferOptions::replicas).
inline constexpr std::uint32_t kMaxReplicas = 3;

/// One copy of a buffer's stripes: copy `replica` on layout server `server`
/// (index into Layout::servers).
struct CopyRef {
  std::uint32_t replica = 0;
  std::uint32_t server = 0;
  auto operator<=>(const CopyRef&) const = default;
};

/// Where a buffer's bytes live.
struct Layout {
  std::string name;
  std::uint64_t size = 0;
  std::uint64_t stripe_unit = 0;
  std::vector<std::string> servers;     ///< in stripe order
  std::vector<std::uint64_t> shares;    ///< bytes of the first copy held by each server
  /// Per server, the run of smbd (a random id drawn at its start) that
  /// holds the share: a server that restarted since holds none of it.
  std::vector<std::uint64_t> instances;
  /// Copies of each stripe: copy r of stripe k lives on server (k + r) mod N,
  /// in a segment as large as server (k mod N)'s share, at the same offsets.
  std::uint32_t replicas = 1;
  /// Copies on live servers that fell behind the others (a client missed
  /// them with a write or a vector op, e.g. one killed between two copies):
  /// no client reads them; `smbctl repair` rebuilds them. Every stripe keeps
  /// a copy that is not stale.
  std::vector<CopyRef> stale;
};

/// How one server of a buffer's layout stands now (Client::check).
enum class ShareState {
  ok,           ///< reachable, and the run of smbd that holds the share
  unreachable,  ///< cannot be reached now: the share may come back with it
  restarted,    ///< smbd restarted since the buffer was made: its share is gone
};
const char* share_state_name(ShareState state) noexcept;

struct BufferSummary {
  std::string name;
  std::uint64_t bytes = 0;       ///< bytes held on that server
  std::uint32_t open_handles = 0;
};

/// What a server did since it started: running totals, so that two
/// status() calls give rates (smbctl top). One-sided RMA never reaches the
/// server and is not counted.
struct ServerActivity {
  std::uint64_t requests = 0;      ///< requests answered (control and data-path calls)
  std::uint64_t errors = 0;        ///< of which answered with an error
  std::uint64_t vector_ops = 0;    ///< vector ops applied by its CPU
  std::uint64_t vector_bytes = 0;  ///< bytes of buffer they covered
  std::uint64_t transport_bytes_written = 0;  ///< written through its CPU (active messages)
  std::uint64_t transport_bytes_read = 0;     ///< read through its CPU
};

/// What waits on a server now (stat's `waiting`): answers it owes.
struct ServerWaits {
  std::uint64_t versions = 0;         ///< Buffer::wait_version calls not yet answered
  std::uint64_t barrier_parties = 0;  ///< parties at a barrier, waiting for the others
  std::uint64_t locks = 0;            ///< lock requests queued behind holders
};

struct ServerStatus {
  std::string address;
  /// Where it is served: a replacement's address (Client::replace_server),
  /// or empty where it is served at `address`.
  std::string served_at;
  /// false: the server could not be reached (error says why) and the
  /// fields below are empty.
  bool reachable = true;
  std::string error;
  std::uint64_t instance = 0;  ///< this run of smbd (see Layout::instances)
  std::string transport;
  std::uint64_t capacity = 0;
  std::uint64_t used = 0;
  std::uint64_t largest_free = 0;
  bool huge_pages = false;
  /// Bytes of the pool already faulted in: smbd answers at once and faults
  /// its pool in the background; capacity once whole (and for servers that
  /// do not say).
  std::uint64_t populated = 0;
  std::uint32_t clients = 0;
  std::vector<BufferSummary> buffers;
  ServerActivity activity;
  ServerWaits waiting;
};

/// What one server says of its host (Client::diagnose, smbctl doctor).
struct ServerDiagnosis {
  std::string address;
  /// false: it could not be asked (error says why), and the rest is empty.
  bool reachable = true;
  std::string error;
  /// Its host's checks for its transport and pool (the same smbd logs at
  /// start-up), as its own process sees them: its limits, its devices.
  std::vector<HostFinding> findings;
  /// Its clock minus this host's, known to within clock_uncertainty (half
  /// the round trip of the call that read it).
  std::chrono::nanoseconds clock_offset{0};
  std::chrono::nanoseconds clock_uncertainty{0};
  std::chrono::nanoseconds round_trip{0};
};

/// What Client::repair did to one buffer.
struct RepairReport {
  struct Copy {
    std::string server;         ///< where the copy was rebuilt
    std::uint32_t replica = 0;  ///< which copy (0 or 1)
    std::string source;         ///< the server it was copied from
    std::uint64_t bytes = 0;
    /// true: `server` pulled the bytes from `source` itself; false: they
    /// passed through the repairing client (SMB_REPAIR_COPY=client, or the
    /// server could not reach the source that way).
    bool server_to_server = false;
  };
  std::string name;
  std::vector<Copy> repaired;            ///< none: every copy was whole
  std::vector<std::string> unreachable;  ///< servers of the layout not reached now (their copies wait for them)
  std::vector<std::string> records_restored;  ///< keepers of its layout record that had lost it (restarted), written back
  std::uint64_t bytes = 0;               ///< bytes copied (the first pass and the recopies)
  std::uint64_t recopied = 0;            ///< of those, bytes copied again: clients changed them during the copy
  std::uint64_t clients_paused = 0;      ///< clients that had it open, paused for the final copy
  double paused_seconds = 0;             ///< how long their writes and vector ops waited (reads never wait)
  double seconds = 0;                    ///< from the start of the repair to the layout's update
};

/// What a checkpoint file holds (Client::save, Client::load, read_checkpoint).
struct CheckpointInfo {
  std::string name;               ///< the buffer it was saved from
  std::uint64_t size = 0;         ///< bytes of data
  std::uint64_t stripe_unit = 0;  ///< the buffer's, when saved
  std::uint64_t version = 0;      ///< the buffer's version (Buffer::version) when saved
  std::uint64_t checksum = 0;     ///< XXH64 of the file's header and data
};

/// Reads a checkpoint file and verifies it whole (header, length, checksum)
/// without changing anything; throws Errc::invalid_argument naming the file
/// and the damage.
CheckpointInfo read_checkpoint(const std::string& path);
/// The same, and the file's data into `out`, which must be exactly its size
/// (CheckpointInfo::size): a model restored without any server.
CheckpointInfo read_checkpoint(const std::string& path, std::span<std::byte> out);

/// An asynchronous operation. Move-only; completes once.
class Request {
 public:
  struct State;
  Request() = default;
  explicit Request(std::shared_ptr<State> state) : state_(std::move(state)) {}
  /// Drives progress until done; throws smb::Error on failure or timeout.
  void wait();
  /// Drives progress once; true when done (throws if it failed).
  bool test();
  bool valid() const noexcept { return static_cast<bool>(state_); }

 private:
  std::shared_ptr<State> state_;
};

namespace detail {  // libsmb's internals, behind Client and Buffer
class ClientCore;
class BufferCore;
}  // namespace detail

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::shared_ptr<detail::BufferCore> core) : core_(std::move(core)) {}
  ~Buffer();
  Buffer(Buffer&&) noexcept = default;
  Buffer& operator=(Buffer&&) noexcept = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  bool valid() const noexcept { return static_cast<bool>(core_); }
  const std::string& name() const;
  std::uint64_t size() const;
  const Layout& layout() const;

  void write(std::uint64_t offset, std::span<const std::byte> data);
  void read(std::uint64_t offset, std::span<std::byte> out);
  /// The spans must stay valid until the Request completes.
  Request write_async(std::uint64_t offset, std::span<const std::byte> data);
  Request read_async(std::uint64_t offset, std::span<std::byte> out);

  /// 64-bit atomics on the word at `offset` (8-byte aligned); return the old value.
  std::uint64_t fetch_add(std::uint64_t offset, std::uint64_t value);
  std::uint64_t compare_swap(std::uint64_t offset, std::uint64_t expected, std::uint64_t desired);

  /// Server-side vector op on `count` elements of `type` at byte `offset`
  /// (element aligned): every server holding part of the region applies the op
  /// to its part, all in parallel; returns once all have. Ops on one server's
  /// part of a buffer apply one at a time, so concurrent accumulates from many
  /// clients never lose an update. `x` holds count elements (empty for scale).
  void apply(VectorOp op, DType type, std::uint64_t offset, std::uint64_t count, double alpha,
             std::span<const std::byte> x = {});
  /// The same with x in `source` at byte `source_offset`, e.g. a worker's
  /// delta area written with write(). `source` must be striped like this
  /// buffer (same servers, same stripe unit) and source_offset - offset a
  /// multiple of stripe unit * servers, so that x lies on the same servers.
  void apply_from(VectorOp op, DType type, std::uint64_t offset, std::uint64_t count, double alpha,
                  const Buffer& source, std::uint64_t source_offset);

  /// Every vector op a server applies advances the version of its part; a
  /// buffer's version is the least over its servers, so an op over the whole
  /// buffer advances it by one (by one per call where x is sent inline and a
  /// server's share exceeds one call's payload: 4 MiB over UCX, less over
  /// native verbs). On a replicated buffer an atomic counts as an op too:
  /// its copies take atomics in the same order as vector ops. A server in
  /// the middle of an op answers once it ends.
  std::uint64_t version();
  /// Returns once version() >= `version` (the servers notify; no polling), or
  /// throws Errc::timeout. Returns the version reached.
  std::uint64_t wait_version(std::uint64_t version, std::chrono::milliseconds timeout);

  /// Where this process maps the bytes [offset, offset + length): their
  /// address here, or nullptr where the transport moves them. Mapped only
  /// on a server's own host over UCX shared memory, for a buffer of one
  /// copy (writes there reach no other copy), and a range within one
  /// stripe. Valid while the buffer is open. Plain loads and stores there
  /// race with other clients' ops as any shared memory does: use
  /// std::atomic_ref for words others change. The memory is shared between
  /// processes, so a futex on a word there (not FUTEX_PRIVATE) wakes a
  /// process waiting on the same word of the same buffer.
  std::byte* mapping(std::uint64_t offset, std::uint64_t length);

  /// Releases this handle on every server (also done by the destructor).
  void close();

 private:
  std::shared_ptr<detail::BufferCore> core_;
};

/// A held lock (Client::lock). Move-only; unlock() or the destructor
/// releases it. If the holder dies, the lock is released as its connection
/// closes; if it hangs, when its lease runs out.
class Lock {
 public:
  struct State;
  Lock() = default;
  explicit Lock(std::shared_ptr<State> state) : state_(std::move(state)) {}
  ~Lock();
  Lock(Lock&&) noexcept = default;
  Lock& operator=(Lock&&) noexcept;
  /// Throws Errc::not_found if the lease had already expired (someone else
  /// may have held the lock since: what was done under it was not exclusive).
  void unlock();
  bool held() const noexcept { return static_cast<bool>(state_); }

 private:
  std::shared_ptr<State> state_;
};

/// Caller memory registered with the fabric for zero-copy transfers
/// (Client::register_memory). Move-only; the destructor unregisters it.
/// While registered, writes and reads whose span lies inside it move bytes
/// straight between it and the servers where the transport can (native
/// verbs: the NIC reads and writes it in place instead of through the
/// transport's staging slots); UCX registers memory on its own and ignores it.
/// Unregister only once the ops on it have completed: an op that timed out
/// may still read or write it until then.
class MemoryRegistration {
 public:
  struct State;
  MemoryRegistration() = default;
  explicit MemoryRegistration(std::shared_ptr<State> state) : state_(std::move(state)) {}
  ~MemoryRegistration();
  MemoryRegistration(MemoryRegistration&&) noexcept = default;
  MemoryRegistration& operator=(MemoryRegistration&&) noexcept;
  bool valid() const noexcept { return static_cast<bool>(state_); }
  void unregister();

 private:
  std::shared_ptr<State> state_;
};

struct LockOptions {
  /// The range locked; locks on one name conflict where their ranges overlap.
  std::uint64_t offset = 0;
  std::uint64_t length = UINT64_MAX;
  std::chrono::milliseconds lease{std::chrono::seconds(30)};    ///< lost after this unless unlocked
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};  ///< longest wait for the grant
};

class Client {
 public:
  explicit Client(ClientOptions options = {});
  ~Client();
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;

  Buffer create(std::string_view name, std::uint64_t size, const BufferOptions& options = {});
  Buffer open(std::string_view name);
  /// Opens the buffer, or creates it when nobody has yet (race-free).
  Buffer open_or_create(std::string_view name, std::uint64_t size, const BufferOptions& options = {});
  void destroy(std::string_view name);

  /// A lock named `name` (a buffer's name, or any name), granted in FIFO
  /// order by the name's home server and the next one (its keepers), and
  /// held at both: the holder keeps it, and nobody else gets it, through
  /// the loss of either; a returning keeper gets its hold back
  /// (docs/reliability.md, "Locks and barriers with two keepers"). Throws
  /// Errc::timeout if not granted in time, Errc::unreachable where neither
  /// keeper can be reached.
  Lock lock(std::string_view name, const LockOptions& options = {});
  /// Returns once `parties` processes (on any hosts) have called barrier()
  /// with this name. A participant that disconnects while others wait turns
  /// the barrier into an Errc::server_gone error for them; throws
  /// Errc::timeout when not all arrive in time. The parties meet at the
  /// name's home server, or at the next one where the home is lost (also
  /// while they wait).
  void barrier(std::string_view name, std::uint32_t parties,
               std::chrono::milliseconds timeout = std::chrono::seconds(120));

  /// Every server's state; one that cannot be reached is reported as such
  /// (reachable false), not thrown.
  /// Writes a snapshot of buffer `name` to the file `path`, read under the
  /// buffer's lock: consistent against writers that take the lock. Against
  /// writers that do not, read again until no server applied an op during
  /// the read, so each op a server applies is wholly in or out; a client's
  /// op may be several server ops (docs/reliability.md). The file appears
  /// only once whole. Throws Errc::timeout if the buffer did not stay still
  /// for a whole read within the client's timeout.
  CheckpointInfo save(std::string_view name, const std::string& path);
  /// Restores a checkpoint into a new buffer named `name` (empty: the name it
  /// was saved from) on `options`' servers (none given: this client's, with
  /// the saved stripe unit). The file is verified whole first; a damaged
  /// file, or a name that is taken, throws and changes nothing.
  Buffer load(const std::string& path, std::string_view name = {},
              const std::optional<BufferOptions>& options = std::nullopt);

  std::vector<ServerStatus> status();
  /// Every server's host checks and clock offset (smbctl doctor). A server
  /// that cannot be reached is reported, not thrown.
  std::vector<ServerDiagnosis> diagnose();
  /// The buffers whose layouts the reachable servers keep (a layout lives
  /// on its name's home server: those homed on an unreachable one are left
  /// out, see unreachable_servers()).
  std::vector<Layout> list();
  Layout info(std::string_view name);
  /// Per server of `layout`: whether its share is there now.
  std::vector<ShareState> check(const Layout& layout);
  /// Rebuilds the copies of a replicated buffer that a restarted server lost
  /// (smbd came back empty on the same address), each from its other copy,
  /// and records the server's new run in the layout; afterwards the buffer
  /// is whole again (docs/reliability.md, "Repair"). Clients that have the
  /// buffer open go on meanwhile: the copy runs under their writes, and only
  /// its final pass (what changed during the copy) pauses their writes and
  /// vector ops; they use the rebuilt copies from then on. Throws
  /// Errc::busy when another repair of it runs or a client holding it did
  /// not pause in time, Errc::data_lost when both copies of some stripes
  /// are gone, Errc::invalid_argument for a buffer with one copy.
  RepairReport repair(std::string_view name);
  /// Replaces a server lost for good (`lost`, as the fabric lists it) by a
  /// new, empty smbd at `replacement`: from now on every client reaches
  /// that server's place at the new address, while layouts and server lists
  /// keep naming it by the old one. Every reachable server is told (and
  /// tells each client in its hello); the next repair() of each replicated
  /// buffer rebuilds its lost copies there (docs/reliability.md, "Replacing
  /// a server"). Refused (Errc::invalid_argument, nothing changed) where
  /// `lost` still answers, `replacement` does not, or either is not what it
  /// should be. Returns the servers told.
  std::vector<std::string> replace_server(std::string_view lost, std::string_view replacement);
  /// Servers replaced so far: {lost address: where it is served now}.
  std::map<std::string, std::string> replaced_servers() const;
  /// Servers found unreachable so far, with the reason.
  std::map<std::string, std::string> unreachable_servers() const;

  const std::vector<std::string>& servers() const;
  /// One line per server: transport, data protocol and the UCX lanes chosen.
  std::vector<std::string> describe_paths() const;

  /// Registers `memory` (pins it) for zero-copy writes and reads; see
  /// MemoryRegistration. Throws Errc::invalid_argument for an empty span and
  /// Errc::transport when the system refuses (e.g. the locked-memory limit).
  MemoryRegistration register_memory(std::span<std::byte> memory);

 private:
  std::shared_ptr<detail::ClientCore> core_;
};

/// A per-job credential: the text of a credential file (JSON) that opens
/// only the buffers whose names start with `prefix`, for `lifetime` from
/// now, derived from the servers' shared secret in `secret_file` (the file
/// smbd runs with as --auth-token-file; no server is asked). A client given
/// the file as its auth_token_file gets permission_denied for any other
/// name, sees only the prefix's buffers in listings, and is disconnected
/// when it expires (docs/reliability.md, "Per-job credentials"). Throws
/// Errc::invalid_argument for a bad prefix or secret file.
std::string make_credential(const std::string& secret_file, const std::string& prefix,
                            std::chrono::seconds lifetime);

/// Parses "64", "4K", "128M", "2G", "1T" (binary units). Throws smb::Error.
std::uint64_t parse_size(std::string_view text);
/// Splits "h1:p1,h2:p2" (semicolons and white space separate too).
std::vector<std::string> parse_server_list(std::string_view text);

}  // namespace smb
