// The transport conformance suite: one channel of every transport this build
// has, driven directly through transport.hpp (no smbd, no control plane), as
// UCX's uct tests drive each transport. What every transport must do:
// put/get that land in the server's memory, atomics on it, calls that carry
// frame and payload and bring the reply back, many calls at once
// (back-pressure: credits, reply queues), serving only channels that
// present an admitted ticket, and failing, not hanging, once the server is
// gone. A transport that cannot run here is skipped, saying why.
#include "transport/registry.hpp"

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <thread>

namespace smb::transport {
namespace {

using namespace std::chrono_literals;

struct TransportCase {
  std::string label;      // test-name suffix
  std::string transport;  // registry name
  const char* ucx_tls;    // UCX_TLS for the case (nullptr: unset)
};

std::vector<TransportCase> cases() {
  std::vector<TransportCase> out;
  for (const auto& name : transport_names()) {
    if (name == "ucx") {
      out.push_back({"ucx_shm", "ucx", nullptr});
      out.push_back({"ucx_tcp", "ucx", "tcp,self"});
    } else {
      out.push_back({name, name, nullptr});
    }
  }
  return out;
}

constexpr std::uint64_t kSegmentId = 7;
constexpr const char* kSegmentName = "fixture/segment";
constexpr std::size_t kPoolBytes = 4u << 20;

// Page-aligned memory for the server's pool (as smbd's MemoryPool).
struct Pool {
  Pool() : base(static_cast<std::byte*>(::mmap(nullptr, kPoolBytes, PROT_READ | PROT_WRITE,
                                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0))) {
    if (base == MAP_FAILED) throw std::runtime_error("mmap failed");
  }
  ~Pool() { ::munmap(base, kPoolBytes); }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  std::byte* base;
};

class TransportConformance : public testing::TestWithParam<TransportCase> {
 protected:
  void SetUp() override {
    const auto& c = GetParam();
    if (c.ucx_tls != nullptr) {
      ::setenv("UCX_TLS", c.ucx_tls, 1);
    } else {
      ::unsetenv("UCX_TLS");
    }
    if (c.transport != "ucx") {
      // As the integration fixture: $SMB_TEST_<NAME>_ADDRESS (verbs: also
      // $SMB_TEST_NATIVE_VERBS), else loopback; verbs needs an RDMA interface.
      std::string variable = "SMB_TEST_";
      for (char ch : c.transport) variable += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      const char* ip = std::getenv((variable + "_ADDRESS").c_str());
      if ((ip == nullptr || *ip == '\0') && c.transport == "verbs") ip = std::getenv("SMB_TEST_NATIVE_VERBS");
      if ((ip == nullptr || *ip == '\0') && c.transport == "verbs")
        GTEST_SKIP() << "verbs: needs an RDMA device; set SMB_TEST_NATIVE_VERBS to the IPv4 address of its "
                        "interface (this kernel has no RDMA support; the soft-RoCE VM has)";
      peer_ = std::string(ip != nullptr && *ip != '\0' ? ip : "127.0.0.1") + ":0";
    }
    server_ = make_server_transport(c.transport);
    pool_registration_ = server_->register_pool(pool_.base, kPoolBytes);
    segment_registration_ = server_->register_memory(pool_.base, kPoolBytes);
    server_->start(
        // The one segment is named kSegmentName, as smbd's are: a channel
        // whose scope that name is outside finds no segment.
        [this](std::uint64_t id, std::string_view scope) -> std::optional<SegmentAccess> {
          if (id != kSegmentId || !std::string_view(kSegmentName).starts_with(scope)) return std::nullopt;
          return SegmentAccess{nullptr, pool_.base, kPoolBytes};
        },
        // The call handler echoes: the reply frame is the frame, then the
        // payload's byte sum (8 bytes), then the calling channel's scope,
        // answered from another thread as smbd's worker pool does.
        [](Bytes frame, Bytes payload, std::string_view scope, Respond respond) {
          std::thread([frame = std::move(frame), payload = std::move(payload), scope = std::string(scope),
                       respond = std::move(respond)]() mutable {
            std::uint64_t sum = std::accumulate(payload.begin(), payload.end(), std::uint64_t{0});
            Bytes reply = frame;
            reply.resize(frame.size() + sizeof sum);
            std::memcpy(reply.data() + frame.size(), &sum, sizeof sum);
            reply.insert(reply.end(), scope.begin(), scope.end());
            respond(std::move(reply));
          }).detach();
        },
        ServerTuning{}, admission());
    client_ = make_client_transport(c.transport);
    channel_ = client_->connect(server_->address(), peer_, kTicket);
    SegmentDescriptor d{kSegmentId, reinterpret_cast<std::uint64_t>(pool_.base), kPoolBytes,
                        segment_registration_->remote_key()};
    segment_ = channel_->attach(d);
  }

  void TearDown() override {
    segment_.reset();
    channel_.reset();
    client_.reset();
    stop_server();
  }

  // Registrations go before the transport that made them (as in smbd).
  void stop_server() {
    if (server_) server_->stop();
    segment_registration_.reset();
    pool_registration_.reset();
    server_.reset();
  }

  CompletionPtr expecting() {
    auto c = std::make_shared<Completion>();
    c->expect();
    return c;
  }
  // Progress until `c` is done; false after `limit`.
  bool wait(const CompletionPtr& c, std::chrono::milliseconds limit = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!c->done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      client_->progress();
    }
    return true;
  }
  void wait_ok(const CompletionPtr& c, const char* what) {
    ASSERT_TRUE(wait(c)) << what << ": no completion within 10 s";
    ASSERT_NO_THROW(c->throw_if_failed()) << what;
  }
  std::uint64_t& word(std::size_t offset) { return *reinterpret_cast<std::uint64_t*>(pool_.base + offset); }

  // The server admits channels that present a live ticket (as smbd's
  // sessions' tickets): the fixture's channel presents kTicket.
  // kScopedTicket is a credential's session's: names starting "other/" only.
  static inline const Bytes kTicket = Bytes(kTicketLength, 0x5a);
  static inline const Bytes kScopedTicket = Bytes(kTicketLength, 0x3c);
  ChannelAdmission admission() {
    return {[this](std::span<const std::uint8_t> ticket) -> std::optional<std::string> {
              std::lock_guard lock(tickets_mutex_);
              auto it = live_.find(Bytes(ticket.begin(), ticket.end()));
              if (it == live_.end()) return std::nullopt;
              return it->second;
            },
            &revocations_};
  }
  void revoke(const Bytes& ticket) {
    {
      std::lock_guard lock(tickets_mutex_);
      live_.erase(ticket);
    }
    revocations_.fetch_add(1);
  }
  std::mutex tickets_mutex_;
  std::map<Bytes, std::string> live_{{kTicket, ""}, {kScopedTicket, "other/"}};
  std::atomic<std::uint64_t> revocations_{0};

  Pool pool_;
  std::string peer_ = "127.0.0.1:0";
  std::unique_ptr<ServerTransport> server_;
  std::unique_ptr<Registration> pool_registration_;
  std::unique_ptr<Registration> segment_registration_;
  std::unique_ptr<ClientTransport> client_;
  std::unique_ptr<Channel> channel_;
  std::unique_ptr<RemoteSegment> segment_;
};

TEST_P(TransportConformance, CapabilitiesAreStated) {
  const auto caps = channel_->caps();
  EXPECT_GE(caps.max_call_payload, 64u * 1024) << "calls carry at least 64 KiB of payload";
  EXPECT_FALSE(channel_->describe().empty());
}

TEST_P(TransportConformance, PutLandsInTheServersMemoryAndGetReadsItBack) {
  std::vector<std::uint8_t> out(300 * 1024), in(out.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::uint8_t>(i * 7 + 3);
  auto put = expecting();
  channel_->put(*segment_, 4096 + 5, out.data(), out.size(), put);
  wait_ok(put, "put");
  EXPECT_EQ(std::memcmp(pool_.base + 4096 + 5, out.data(), out.size()), 0) << "the server's memory holds the bytes";
  std::memset(pool_.base + 4096 + 5, 0xab, 16);  // the server changes them: get must see it
  auto get = expecting();
  channel_->get(*segment_, 4096 + 5, in.data(), in.size(), get);
  wait_ok(get, "get");
  EXPECT_EQ(in[0], 0xab);
  EXPECT_EQ(std::memcmp(in.data() + 16, out.data() + 16, out.size() - 16), 0);
}

TEST_P(TransportConformance, AtomicsWorkOnTheServersWord) {
  word(64) = 40;
  std::uint64_t old = 0;
  auto add = expecting();
  channel_->fetch_add(*segment_, 64, 2, &old, add);
  wait_ok(add, "fetch_add");
  EXPECT_EQ(old, 40u);
  EXPECT_EQ(word(64), 42u);
  auto miss = expecting();
  channel_->compare_swap(*segment_, 64, 41, 100, &old, miss);
  wait_ok(miss, "compare_swap (no swap)");
  EXPECT_EQ(old, 42u);
  EXPECT_EQ(word(64), 42u);
  auto hit = expecting();
  channel_->compare_swap(*segment_, 64, 42, 100, &old, hit);
  wait_ok(hit, "compare_swap");
  EXPECT_EQ(old, 42u);
  EXPECT_EQ(word(64), 100u);
}

TEST_P(TransportConformance, CallsCarryFrameAndPayloadAndBringTheReplyBack) {
  const std::vector<std::uint8_t> frame{1, 2, 3, 4, 5};
  std::vector<std::byte> payload(channel_->caps().max_call_payload, std::byte{1});
  Bytes reply;
  auto call = expecting();
  channel_->call(frame, payload, &reply, call);
  wait_ok(call, "call");
  ASSERT_EQ(reply.size(), frame.size() + 8);
  EXPECT_TRUE(std::equal(frame.begin(), frame.end(), reply.begin()));
  std::uint64_t sum = 0;
  std::memcpy(&sum, reply.data() + frame.size(), sizeof sum);
  EXPECT_EQ(sum, payload.size());
}

// A channel whose ticket the server does not admit gets nothing served:
// refused at connect, or its calls refused; and a channel admitted once is
// served no more after its ticket is revoked (its session closed).
TEST_P(TransportConformance, OnlyChannelsWithAnAdmittedTicketAreServed) {
  const std::vector<std::uint8_t> frame{1, 2, 3};
  const auto refused = [&](const Bytes& ticket, const char* what) {
    auto other = make_client_transport(GetParam().transport);
    std::unique_ptr<Channel> channel;
    try {
      channel = other->connect(server_->address(), peer_, ticket);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::permission_denied) << what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("ticket"), std::string::npos) << e.what();
      return;
    }
    Bytes reply;
    auto call = expecting();
    channel->call(frame, {}, &reply, call);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!call->done() && std::chrono::steady_clock::now() < deadline) other->progress();
    ASSERT_TRUE(call->done()) << what << ": no answer";
    try {
      call->throw_if_failed();
      ADD_FAILURE() << what << ": its call was served";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::permission_denied) << what << ": " << e.what();
    }
  };
  refused(Bytes(kTicketLength, 0x77), "a wrong ticket");
  refused(Bytes{}, "no ticket");
  // The fixture's channel is served...
  Bytes reply;
  auto before = expecting();
  channel_->call(frame, {}, &reply, before);
  wait_ok(before, "an admitted channel's call");
  // ...until its ticket is revoked.
  revoke(kTicket);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  bool served = true;
  while (served && std::chrono::steady_clock::now() < deadline) {
    auto after = expecting();
    channel_->call(frame, {}, &reply, after);
    if (!wait(after, 5s)) break;
    served = !after->failed();
    if (served) std::this_thread::sleep_for(50ms);  // verbs drops it from its event loop
  }
  EXPECT_FALSE(served) << "a revoked channel was still served 5 s later";
}

// What a channel whose ticket was revoked (its session closed) can still do
// with the key it kept (issue 36, item 7; docs/reliability.md,
// "Authentication"). Where puts and gets are one-sided -- UCX's rma
// protocol: shared memory and CMA here, UCX's verbs lanes elsewhere -- they
// never reach the server's code, and UCX gives the server nothing to cut
// one endpoint's access with: a remote key has no revocation, and unmapping
// the memory would cut every client of the pool. So there they still land
// and still read the server's memory, and this test says so (it fails the
// day that changes). Everywhere else (UCX's active messages, the tcp
// transport, native verbs, whose queue pairs are disconnected) the server
// refuses them.
TEST_P(TransportConformance, AKeptKeyOutlivesItsRevocationOnlyWhereRmaIsOneSided) {
  const bool one_sided = channel_->describe().find("data protocol rma") != std::string::npos;
  revoke(kTicket);
  // Until a call is refused: the revocation has taken effect (verbs drops
  // the channel from its event loop a moment later).
  const std::vector<std::uint8_t> frame{4};
  Bytes reply;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  for (bool served = true; served && std::chrono::steady_clock::now() < deadline;) {
    auto call = expecting();
    channel_->call(frame, {}, &reply, call);
    served = wait(call, 5s) && !call->failed();
    if (served) std::this_thread::sleep_for(50ms);
  }
  constexpr int kOps = 200;
  int landed = 0, read_back = 0;
  for (int i = 0; i < kOps; ++i) {
    const std::uint64_t tag = 0x5eed'0000ull + static_cast<std::uint64_t>(i);
    auto put = expecting();
    channel_->put(*segment_, 8192, &tag, sizeof tag, put);
    const bool answered = wait(put, 5s);
    if (answered && !put->failed() && word(8192) == tag) ++landed;
    word(8200) = tag + 1;  // the server's own write: a get that works sees it
    std::uint64_t got = 0;
    auto get = expecting();
    channel_->get(*segment_, 8200, &got, sizeof got, get);
    if (wait(get, 5s) && !get->failed() && got == tag + 1) ++read_back;
    if (!answered) break;  // neither served nor refused: counted as not served
  }
  std::printf("[ measured ] %s: after its ticket was revoked, %d of %d puts landed and %d of %d gets read the "
              "server's memory\n",
              channel_->describe().c_str(), landed, kOps, read_back, kOps);
  if (one_sided) {
    EXPECT_EQ(landed, kOps) << "UCX's one-sided puts were cut after all: docs/reliability.md can say so";
    EXPECT_EQ(read_back, kOps);
  } else {
    EXPECT_EQ(landed, 0) << "a revoked channel's put reached the server's memory";
    EXPECT_EQ(read_back, 0) << "a revoked channel's get read the server's memory";
  }
}

// A channel presenting a credential's session's ticket: its calls carry its
// scope to the handler (smbd refuses names outside it there), and its
// server-assisted ops reach no segment outside it. (One-sided RMA never
// reaches the server: smbd hands such a session no key outside its scope.)
TEST_P(TransportConformance, AScopedChannelCarriesItsScopeAndReachesNothingOutsideIt) {
  auto other = make_client_transport(GetParam().transport);
  auto channel = other->connect(server_->address(), peer_, kScopedTicket);
  const auto finish = [&](const CompletionPtr& c, const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!c->done() && std::chrono::steady_clock::now() < deadline) other->progress();
    ASSERT_TRUE(c->done()) << what << ": no answer";
  };
  const std::vector<std::uint8_t> frame{9, 8};
  Bytes reply;
  auto call = expecting();
  channel->call(frame, {}, &reply, call);
  finish(call, "call");
  ASSERT_NO_THROW(call->throw_if_failed());
  EXPECT_EQ(std::string(reply.begin() + static_cast<std::ptrdiff_t>(frame.size() + 8), reply.end()), "other/");
  // The fixture's own channel (no scope) hands the handler an empty one.
  auto mine = expecting();
  channel_->call(frame, {}, &reply, mine);
  wait_ok(mine, "an unscoped channel's call");
  EXPECT_EQ(reply.size(), frame.size() + 8);
  // Where atomics are one-sided (shared memory, native verbs) no server
  // check is on their path: the calls above are what this path can show.
  if (channel->caps().native_atomics) return;
  SegmentDescriptor d{kSegmentId, reinterpret_cast<std::uint64_t>(pool_.base), kPoolBytes,
                      segment_registration_->remote_key()};
  auto segment = channel->attach(d);
  word(128) = 5;
  std::uint64_t old = 0;
  auto add = expecting();
  channel->fetch_add(*segment, 128, 1, &old, add);
  finish(add, "fetch_add");
  try {
    add->throw_if_failed();
    ADD_FAILURE() << "a fetch_add outside the channel's scope was served";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::not_found) << e.what();
  }
  EXPECT_EQ(word(128), 5u) << "the word outside the scope is untouched";
}

// More calls than any credit window at once: the transport queues what it
// cannot send yet, and every reply comes back to its own call.
TEST_P(TransportConformance, ManyCallsAtOnceAllComeBack) {
  constexpr int kCalls = 200;
  std::vector<std::vector<std::uint8_t>> frames(kCalls);
  std::vector<std::vector<std::byte>> payloads(kCalls);
  std::vector<Bytes> replies(kCalls);
  auto all = std::make_shared<Completion>();
  all->expect(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    frames[i] = {static_cast<std::uint8_t>(i), static_cast<std::uint8_t>(i >> 8)};
    payloads[i].assign(static_cast<std::size_t>(i + 1), std::byte{2});
    channel_->call(frames[i], payloads[i], &replies[i], all);
  }
  wait_ok(all, "200 calls");
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_EQ(replies[i].size(), 10u) << i;
    EXPECT_EQ(replies[i][0], static_cast<std::uint8_t>(i)) << "reply " << i << " answers its own call";
    std::uint64_t sum = 0;
    std::memcpy(&sum, replies[i].data() + 2, sizeof sum);
    EXPECT_EQ(sum, 2u * static_cast<std::uint64_t>(i + 1)) << i;
  }
}

TEST_P(TransportConformance, AGoneServerFailsOpsInsteadOfHanging) {
  stop_server();  // the server's side of every connection goes
  if (!channel_->caps().detects_peer_failure) channel_->peer_lost("its control connection closed (test)");
  std::vector<std::uint8_t> data(4096);
  Bytes reply;
  const std::vector<std::uint8_t> frame{9};
  auto call = expecting();
  channel_->call(frame, {}, &reply, call);
  ASSERT_TRUE(wait(call, 30s)) << "a call to a gone server must fail, not hang";
  EXPECT_THROW(call->throw_if_failed(), Error);
  auto late = expecting();
  channel_->get(*segment_, 0, data.data(), data.size(), late);
  ASSERT_TRUE(wait(late, 30s));
  try {
    late->throw_if_failed();
    ADD_FAILURE() << "an op after the failure succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::server_gone) << e.what();
  }
  EXPECT_TRUE(channel_->failure().has_value());
}

// rdma-core's device contexts do not survive fork(): a child of a process
// that used native verbs is told so at connect, instead of failing its first
// post with a bare EPERM.
TEST_P(TransportConformance, AClientForkedAfterRdmaUseIsToldWhy) {
  if (GetParam().transport != "verbs") GTEST_SKIP() << "a native verbs matter (UCX: its own fork rules)";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      auto transport = make_client_transport("verbs");
      transport->connect(server_->address(), peer_, kTicket);
    } catch (const Error& e) {
      ::_exit(std::string(e.what()).find("fork") != std::string::npos ? 0 : 2);
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(4);  // connected: nothing said
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: an error that does not name fork; 4: no error at all";
}

std::string case_name(const testing::TestParamInfo<TransportCase>& param) { return param.param.label; }

INSTANTIATE_TEST_SUITE_P(Transports, TransportConformance, testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace smb::transport
