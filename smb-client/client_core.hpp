#pragma once
// The state behind smb::Client: one ServerLink (control connection + data
// channel) per memory server, and the buffer-level control flows
// (create/open/destroy) that span servers.
#include "control_connection.hpp"
#include "data_path.hpp"
#include "lock_restorer.hpp"
#include "op_gate.hpp"
#include "protocol/fixed_calls.hpp"
#include "protocol/server_map.hpp"
#include "protocol/striping.hpp"
#include "transport/transport.hpp"
#include "util/random_id.hpp"
#include "wait_connections.hpp"

#include <smb/client.hpp>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <thread>

namespace smb {

namespace client {
struct ServerLink {
  std::unique_ptr<ControlConnection> control;
  std::unique_ptr<WaitConnections> waits;  // locks and barriers wait on these
  std::unique_ptr<transport::Channel> channel;
  std::uint64_t instance = 0;  // the run of smbd we said hello to (0: a server that has none)
  std::string address;         // where it was reached: the server's own, or its replacement's
  // What the channel connected with (a repair hands them to another smbd,
  // which pulls a copy from this one as one more channel of this session).
  protocol::Bytes transport_address, ticket;

  // Where the transport cannot see a dead server itself, the closed control
  // connection tells: the channel is failed, so that ops fail instead of
  // waiting for their timeout (or writing into memory nobody serves).
  void check_alive() {
    if (!channel->caps().detects_peer_failure && control->peer_closed())
      channel->peer_lost("its control connection closed");
  }
  bool alive() {
    check_alive();
    return !channel->failure();
  }
};

// An error that says a server is not there (rather than that it refused).
bool is_absence(const Error& e);
// "buffer 'x': write of N bytes at offset O": how errors name a buffer op.
std::string describe_buffer_op(const std::string& buffer, const char* op, std::uint64_t offset, std::uint64_t length);
}  // namespace client

// Declared in smb::detail by the public header (which names them only as
// the pimpl of Client and Buffer); libsmb's own code says them unqualified.
using detail::BufferCore;
using detail::ClientCore;

namespace client {
class ServerCalls;
class RepairJob;
class StripedPath;
class ReplicatedPath;
}

namespace detail {

class ClientCore : public std::enable_shared_from_this<ClientCore> {
 public:
  explicit ClientCore(ClientOptions options);
  ~ClientCore();

  std::shared_ptr<BufferCore> create(std::string_view name, std::uint64_t size, const BufferOptions& options);
  std::shared_ptr<BufferCore> open(std::string_view name);
  void destroy(std::string_view name);
  Lock lock(std::string_view name, const LockOptions& options);
  void barrier(std::string_view name, std::uint32_t parties, std::chrono::milliseconds timeout);
  std::vector<ServerStatus> status();
  std::vector<Layout> list();
  Layout info(std::string_view name);
  std::vector<ShareState> check(const Layout& layout);
  RepairReport repair(std::string_view name);  // repair.cpp: a RepairJob, again while a client cannot be paused yet
  std::map<std::string, std::string> unreachable_servers() const;
  std::vector<std::string> describe_paths();
  std::vector<ServerDiagnosis> diagnose();  // diagnose.cpp

  // Connects on first use, so a layout may name servers this client was not given.
  // A server that could not be reached fails at once for a second, then is tried again.
  client::ServerLink& link(const std::string& server);
  // The link, connected anew where the one kept has lost its server (a
  // server that restarted); the old one is kept for requests that name it.
  client::ServerLink& relink(const std::string& server);

  // Online repair (repair_watch.cpp). An open or create of a replicated
  // buffer holds its layout record at its keepers (hold_layout), so that a
  // repair pauses this client's writes to it for its final copy; a watcher
  // thread per keeper answers those pauses, and holds again at a keeper
  // that came back (restarted) once it has the record again.
  // Holds: per keeper, the link whose control session holds it there (a
  // hold dies with its session; links are kept while the client lives, so
  // a relinked server's new link is never taken for its old one, even
  // where the restarted server numbers its sessions alike).
  using HeldAt = std::map<std::string, const client::ServerLink*>;
  void release_held(const BufferCore* buffer, const std::string& name);
  // This client's identity (the hello's id), and whether it has a Buffer of `name` open.
  std::uint64_t id() const { return id_; }
  bool has_open(const std::string& name);
  const std::string& home_of(std::string_view name) const;
  // The servers that keep `name`'s layout record: its home and, in a fabric
  // of more than one server, the next in sorted order. A replicated
  // buffer's record is kept on both, so that losing one server loses no
  // record (docs/reliability.md, "Layout records").
  std::vector<std::string> keepers_of(std::string_view name) const;
  // Stale copies (Layout::stale): records one at every keeper of `name` that
  // this client reaches (mark_stale), so that every client leaves it until a
  // repair. Throws data_lost where a keeper refuses: every other copy of its
  // stripes is stale already. False where no keeper could be reached.
  bool record_stale(const std::string& name, CopyRef copy, const std::string& why);
  // The mark_stale request of `copy` (record_stale, and a repair writing marks back).
  static protocol::Body stale_mark(const std::string& name, CopyRef copy, const std::string& why);
  // The stale copies in `name`'s layout record now.
  std::vector<CopyRef> recorded_stale(const std::string& name);
  transport::ClientTransport& transport() { return *transport_; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  const std::vector<std::string>& servers() const { return sorted_servers_; }
  // Replacing a lost server (replace.cpp): `slot` is served at `address`
  // from now on, told to every server reachable; returns the servers told.
  std::vector<std::string> replace_server(const std::string& slot, const std::string& address);
  // Tells every reachable server the replacements it lacks (a repair's first step).
  void publish_server_map();
  // Where `slot` is served now (itself unless replaced), and the map.
  std::string resolve(const std::string& slot) const;
  protocol::ServerMap server_map() const;

 private:
  // The home server's link, or an error naming the buffer whose layout it keeps.
  client::ServerLink& home_link(const std::string& name);
  // `request` to the first keeper of `name` that has its record: the home,
  // else (unreachable, or restarted without it) the next. Returns the reply
  // and that keeper; throws the home's error when none has it.
  // The not_found error for a name its keepers do not have, naming the
  // servers asked and the likely cause (another server list).
  Error unknown_name(const std::string& name, const Error& at_keeper) const;
  std::pair<protocol::Body, std::string> ask_keepers(const std::string& name, protocol::MessageType type,
                                                     const protocol::Body& request);
  // Opens every present copy's segment, adding each to `opened`.
  std::vector<transport::SegmentDescriptor> open_segments(const Layout& layout,
                                                          std::vector<std::pair<std::string, std::string>>& opened);
  std::shared_ptr<BufferCore> attach(const Layout& layout,
                                     const std::vector<transport::SegmentDescriptor>& descriptors);
  client::ServerLink& connect(const std::string& server);
  // connect, and where the server is not there, again at its replacement's
  // address if the servers linked now say it was replaced.
  client::ServerLink& connect_or_replaced(const std::string& server);
  // Replaced servers (protocol/server_map.hpp), under links_mutex_: takes a
  // hello's map; links that now point at an old place are retired.
  void learn_server_map(const protocol::Body& hello, const std::string& from);
  // Asks the servers linked now for their map; true when `server` is
  // served somewhere new (a lost server replaced meanwhile).
  bool refresh_server_map(const std::string& server);
  // Takes a link out of use (relinked, or its server moved); returns the next.
  using Links = std::map<std::string, std::unique_ptr<client::ServerLink>>;
  Links::iterator retire(Links::iterator link);
  void stat_of(const std::string& server, ServerStatus& out);
  void note_unreachable(const std::string& server, const Error& e);
  // A repair's phases use the keepers, links and checks above (repair_job.hpp).
  friend class client::RepairJob;
  // Throws Errc::data_lost where a server of `layout` restarted since it was made.
  void check_not_lost(const Layout& layout, const std::string& context);
  // Throws Errc::data_lost where no copy of some stripes is `present`.
  static void check_copies_left(const Layout& layout, const std::vector<bool>& present, const std::string& context);

 public:
  // Bytes copy `replica` of a buffer takes on its server `server` (index into layout.servers).
  static std::uint64_t copy_share(const Layout& layout, std::uint32_t replica, std::size_t server);

 private:

  // Holding (repair_watch.cpp): hold_layout at `name`'s home, waiting while
  // a repair's pause runs; then the open attaches and calls finish_hold.
  // The ticket covers the time between: a pause answered meanwhile is
  // applied by finish_hold (its layout adopted, its gate closed).
  class HoldTicket;
  protocol::Body hold_record(const std::string& name, HoldTicket& ticket);
  void finish_hold(HoldTicket& ticket, const std::shared_ptr<BufferCore>& buffer, const Layout& held_layout);
  // Releases the holds of `held_at` whose session still lives (a hold dies with its session).
  void release_at(const std::string& name, const HeldAt& held_at);
  void start_watcher(const std::string& keeper);
  static void watch_keeper(std::weak_ptr<ClientCore> self, std::string keeper);
  // After `keeper` was lost: holds every open that should be held there
  // again, once it is back with the record. Returns when all are (true), or
  // when none wants a hold there any more or the client is gone (false).
  static bool hold_again(const std::weak_ptr<ClientCore>& weak, const std::string& keeper);
  enum class Rehold { held, nothing_to_hold, later };
  Rehold try_hold_again(const std::string& keeper);
  void answer_pause(const std::string& keeper, client::ControlConnection& connection, std::uint64_t holder,
                    const protocol::Body& ask);
  // Relinks the servers whose run in `layout` differs from the one our dead link knew.
  void refresh_links(const Layout& layout, bool every_dead);

  struct Held {
    struct Open {
      const BufferCore* raw;
      std::weak_ptr<BufferCore> buffer;
      HeldAt held_at;  // where it is held
    };
    std::vector<Open> buffers;
    std::uint32_t opening = 0;     // opens between hold_layout and finish_hold
    std::uint32_t pausing = 0;     // repairs' pauses (one per keeper) holding the gates
    std::optional<Layout> latest;  // the layout the last pause ended with
  };
  struct Watcher {
    std::thread thread;
    bool running = false;
  };
  std::mutex held_mutex_;
  std::map<std::string, Held> held_;         // by buffer name
  std::map<std::string, Watcher> watchers_;  // by keeper

  // This client's identity, in the hello of every connection to every
  // server: a repair checks by it that everyone with a copy open was paused.
  const std::uint64_t id_ = util::random_id();
  ClientOptions options_;
  protocol::ClientAuth auth_;  // from options_.auth_token_file: a secret or a credential; empty: none
  std::vector<std::string> sorted_servers_;
  std::unique_ptr<transport::ClientTransport> transport_;
  mutable std::mutex links_mutex_;
  Links links_;
  std::vector<std::unique_ptr<client::ServerLink>> retired_links_;  // relinked: requests may still name them
  struct Unreachable {
    std::string why;
    std::chrono::steady_clock::time_point since;  // the last attempt
  };
  static constexpr std::chrono::seconds kRetryUnreachable{1};
  std::map<std::string, Unreachable> unreachable_;  // servers that could not be reached, and why
  protocol::ServerMap server_map_;                   // where replaced servers are served now
  std::atomic<bool> published_server_map_{false};    // by this client's first repair
  client::LockRestorer lock_restorer_;               // last: its thread ends before the rest goes
};

// One open's hold, from before hold_layout to finish_hold (repair_watch.cpp).
class ClientCore::HoldTicket {
 public:
  HoldTicket(ClientCore& client, std::string name);
  ~HoldTicket();  // unfinished: the hold (if taken) is released
  HoldTicket(const HoldTicket&) = delete;
  HoldTicket& operator=(const HoldTicket&) = delete;
  bool held() const { return !held_at_.empty(); }

 private:
  friend class ClientCore;
  ClientCore& client_;
  std::string name_;
  HeldAt held_at_;         // the keepers that hold it for us
  bool finished_ = false;  // the buffer owns the hold now
};

class BufferCore : public std::enable_shared_from_this<BufferCore> {
 public:
  BufferCore(std::shared_ptr<ClientCore> client, Layout layout,
             std::vector<std::unique_ptr<transport::RemoteSegment>> segments);
  ~BufferCore();
  // `segments` holds replicas() x servers entries (copy r on server s at
  // r * servers + s); null where a server holds no share of that copy, or
  // (with replicas) cannot be reached.

  const Layout& layout() const { return layout_; }
  // Online repair (repair_watch.cpp): the gate a repair's final copy pauses,
  // and the layout it leaves: copies on servers whose run changed are opened
  // there and used from now on.
  client::OpGate& gate() { return gate_; }
  void adopt(const Layout& layout);
  // Copies other clients found behind (Layout::stale): no longer used.
  void learn_stale(const std::vector<CopyRef>& stale) { path_->learn_stale(stale); }
  // Each request is checked here, then carried by the buffer's data path
  // (data_path.hpp: striped or replicated, chosen at open).
  Request write(std::uint64_t offset, std::span<const std::byte> data);
  Request read(std::uint64_t offset, std::span<std::byte> out);
  std::uint64_t atomic(bool compare_swap, std::uint64_t offset, std::uint64_t a, std::uint64_t b);
  std::byte* mapping(std::uint64_t offset, std::uint64_t length);
  // x inline (`data`) or in `source` at `source_offset`; see Buffer::apply.
  void apply(VectorOp op, DType type, std::uint64_t offset, std::uint64_t count, double alpha,
             std::span<const std::byte> data, const BufferCore* source, std::uint64_t source_offset);
  void close();
  std::uint64_t version();
  // Each server's version of its part (servers with a share, in layout order).
  std::vector<std::uint64_t> server_versions();
  std::uint64_t wait_version(std::uint64_t version, std::chrono::milliseconds timeout);

 private:
  // The strategies work on the buffer's segments, links and requests below.
  friend class client::StripedPath;
  friend class client::ReplicatedPath;

  std::string describe(const char* op, std::uint64_t offset, std::uint64_t length) const;
  void check_range(const char* op, std::uint64_t offset, std::uint64_t length) const;
  std::uint32_t replicas() const { return layout_.replicas; }
  std::uint32_t server_count() const { return static_cast<std::uint32_t>(layout_.servers.size()); }
  // Copy r of the stripes at position p (a stripe's server in copy 0) lives on this server.
  std::uint32_t replica_server(std::uint32_t position, std::uint32_t replica) const {
    return protocol::copy_server(position, replica, server_count());
  }
  transport::RemoteSegment* segment(std::uint32_t replica, std::uint32_t server) const {
    return segments_[std::size_t{replica} * server_count() + server].load(std::memory_order_acquire);
  }
  client::ServerLink* link_at(std::uint32_t server) const { return links_[server].load(std::memory_order_acquire); }
  bool alive(std::uint32_t server) const { return link_at(server) != nullptr && link_at(server)->alive(); }
  // Adds the calls of one part on copy `replica`; `orders` (one per call) tags them.
  void add_vector_calls(client::ServerCalls& calls, const client::VectorCallArgs& args, std::uint32_t position,
                        const client::VectorPart& part, std::uint32_t replica,
                        const std::vector<std::uint64_t>* orders) const;
  protocol::StripeGeometry geometry() const;
  std::vector<protocol::StripePiece> pieces(std::uint64_t offset, std::uint64_t length) const;
  std::shared_ptr<Request::State> new_state(const char* op, std::uint64_t offset, std::uint64_t length) const;
  // new_state, its request on `server`.
  std::shared_ptr<Request::State> new_state_on(const char* op, std::uint64_t offset, std::uint64_t length,
                                               std::uint32_t server) const;
  // A request over `pieces`, its servers checked for liveness first.
  std::shared_ptr<Request::State> start(const char* op, std::uint64_t offset, std::uint64_t length,
                                        std::span<const protocol::StripePiece> pieces);
  static const std::shared_ptr<Request::State>& finished_state();

  std::shared_ptr<ClientCore> client_;
  Layout layout_;
  std::shared_ptr<const std::string> name_;  // layout_.name, shared with requests' error texts
  std::vector<std::string> segment_names_;   // per copy: its segments' name on the servers
  // Ops read these without a lock while a repair's end (adopt) may set
  // them: atomic slots, and the segments owned apart (those replaced too,
  // as a request may still name one).
  std::unique_ptr<std::atomic<transport::RemoteSegment*>[]> segments_;  // per copy and server; null: none
  std::unique_ptr<std::atomic<client::ServerLink*>[]> links_;  // per layout server; null: unreachable (replicated)
  std::vector<std::unique_ptr<transport::RemoteSegment>> owned_segments_;  // under segments_mutex_
  client::OpGate gate_;
  std::mutex adopt_mutex_;     // one adopt at a time
  std::mutex segments_mutex_;  // guards owned_segments_ and layout_.instances
  std::unique_ptr<client::DataPath> path_;  // after the members it uses
  std::once_flag closed_;
};

}  // namespace detail

// A lock is held at each keeper of its name (keeper_lock.cpp); the
// restorer edits the holds, under `mutex`, where one was lost.
struct Lock::State {
  struct Hold {
    std::string keeper;
    std::shared_ptr<client::ControlConnection> connection;  // the one that holds it there; null: not held there
    std::uint64_t token = 0;
    bool given_up = false;  // another holder took the range there while it was lost
  };
  std::shared_ptr<ClientCore> client;  // keeps the connections' pools alive
  std::string name;
  std::uint64_t offset = 0, length = 0;
  std::chrono::milliseconds lease{0};
  // From the first keeper's grant (its reply), which later keepers' leases
  // are cut to end with; none before it.
  std::optional<std::chrono::steady_clock::time_point> lease_end;
  std::mutex mutex;
  std::vector<Hold> holds;
  std::atomic<bool> released{false};
};

struct MemoryRegistration::State {
  std::shared_ptr<ClientCore> client;  // keeps the transport alive
  std::optional<std::uint64_t> handle;  // none where the transport needs no registration
};

// Small ops are ~0.1 us of transport, so a request describes itself only
// when it fails and reads the clock only when it has to wait. Its completion
// is a separate object: transports hold that while an op is in flight, and
// it must not keep the client (and so the transport) alive.
struct Request::State {
  std::shared_ptr<ClientCore> client;
  transport::CompletionPtr completion = std::make_shared<transport::Completion>();
  // None until a wait first has to wait: then now + the client's timeout.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  std::function<std::string()> what;  // for server calls: what they are (built only for an error)
  struct BufferOp {  // for buffer ops: "buffer 'x': write of N bytes at offset O"
    std::shared_ptr<const std::string> buffer;
    const char* op = nullptr;
    std::uint64_t offset = 0, length = 0;
  };
  std::optional<BufferOp> buffer_op;
  std::vector<client::ServerLink*> links;  // the servers the request involves
  // Requests made of others (replicated buffers): drives them instead, with
  // wait = true until done; returns whether done; throws on failure.
  std::function<bool(bool wait)> composite;

  std::string describe() const;
};

}  // namespace smb
