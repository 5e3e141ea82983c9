// libFuzzer target: every message's body decoder and handler, through the
// daemon's own ControlServer (registry, coordination, vector ops on the
// worker pool) over a real pool registered with the real UCX transport.
//
// An input is a sequence of requests, so that the fuzzer can build state
// (reserve a name, allocate, run vector ops on it, lock, wait...):
//   [u8 how][u16 type][u16 length][length bytes] ...
// how & 1 == 0: a control request of `type` with those bytes as its body,
// from session 1 or 2 (how & 2); how & 1 == 1: a data-path call whose frame
// is those bytes (header included) and whose payload is the rest of a split.
// Each input starts from a fresh daemon state. Findings: a crash, a
// sanitizer report, a request answered twice, or one never answered that
// cannot be waiting (everything but a lock, a version_call, a barrier_call
// and a vector call with an order).
#include "control_server.hpp"
#include "memory_pool.hpp"
#include "registry.hpp"
#include "protocol/fixed_calls.hpp"
#include "transport/ucx/ucx_server.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace {

using namespace smb;
using protocol::MessageType;

// A credential's scope (a session or a channel held by one) and none.
const std::string kScope = "t", kNoScope;

bool may_wait(std::uint16_t type) { return type == static_cast<std::uint16_t>(MessageType::lock); }

class Answers {
 public:
  // Counts one request's replies; a second one is a finding.
  class Counter {
   public:
    Counter(Answers* answers, std::size_t index) : answers_(answers), index_(index) {}
    void operator()() const {
      std::lock_guard lock(answers_->mutex_);
      if (++answers_->count_[index_] > 1) std::abort();  // answered twice
    }

   private:
    Answers* answers_;
    std::size_t index_;
  };

  Counter add(bool must_answer) {
    std::lock_guard lock(mutex_);
    count_.push_back(0);
    must_answer_.push_back(must_answer);
    return Counter(this, count_.size() - 1);
  }
  bool all_answered() {
    std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < count_.size(); ++i)
      if (must_answer_[i] && count_[i] == 0) return false;
    return true;
  }

 private:
  std::mutex mutex_;
  std::vector<int> count_;
  std::vector<bool> must_answer_;
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static transport::ucx::UcxServerTransport transport;  // UCX's set-up is paid once
  boost::asio::io_context io;
  server::MemoryPool pool(2u << 20);
  server::SessionQuotas quotas{64, 64, 64 * 1024, 64};
  server::Registry registry(pool, transport, quotas);
  server::ServerIdentity identity{"127.0.0.1:7000", "ucx", transport.address()};
  server::ConnectionLimits limits;
  limits.max_connections = 4;
  // Before the server: ops still running on its worker pool (one that
  // waited for its turn) answer while the server's destructor drains it.
  Answers answers;
  // No pull_copy connects anywhere: the harness opens no connections, and a
  // made-up transport address is trusted input (the fabric secret's,
  // docs/reliability.md "Authentication").
  server::ControlServer control(io, {boost::asio::ip::make_address("127.0.0.1"), 0}, registry, identity, limits,
                                quotas, {}, false);

  while (size >= 5) {
    const std::uint8_t how = data[0];
    const auto type = static_cast<std::uint16_t>(data[1] | data[2] << 8);
    const std::size_t length = std::min<std::size_t>(data[3] | data[4] << 8, size - 5);
    const std::span<const std::uint8_t> bytes(data + 5, length);
    data += 5 + length;
    size -= 5 + length;
    if ((how & 1) == 0) {
      auto counted = answers.add(!may_wait(type));
      // Session 2 holds a credential for "t" (protocol/credential.hpp): its names are checked.
      const server::SessionId session = 1 + ((how >> 1) & 1);
      control.serve(session, session == 2 ? kScope : kNoScope, type, bytes, [counted](protocol::Body) { counted(); });
    } else {
      // The frame's own header decides the type; a call can only wait as a version_call or barrier_call.
      const std::size_t split = std::min<std::size_t>(how >> 1, length);
      transport::Bytes frame(bytes.begin(), bytes.end() - static_cast<std::ptrdiff_t>(split));
      transport::Bytes payload(bytes.end() - static_cast<std::ptrdiff_t>(split), bytes.end());
      const auto call_type = frame.size() >= 8 ? static_cast<std::uint16_t>(frame[6] | frame[7] << 8) : 0;
      // A vector or atomic call with an order waits for the op before it (a copy following its primary).
      const auto has_order = [&frame](std::size_t fixed_size, std::size_t at) {
        return frame.size() >= protocol::kHeaderSize + fixed_size &&
               std::any_of(frame.begin() + static_cast<std::ptrdiff_t>(protocol::kHeaderSize + at),
                           frame.begin() + static_cast<std::ptrdiff_t>(protocol::kHeaderSize + at + 8),
                           [](auto b) { return b != 0; });
      };
      const bool ordered =
          (call_type == static_cast<std::uint16_t>(MessageType::vector_call) &&
           has_order(protocol::kVectorCallFixedSize, 40)) ||
          (call_type == static_cast<std::uint16_t>(MessageType::atomic_call) && has_order(protocol::kAtomicCallFixedSize, 32));
      auto counted = answers.add(call_type != static_cast<std::uint16_t>(MessageType::version_call) &&
                                 call_type != static_cast<std::uint16_t>(MessageType::barrier_call) && !ordered);
      control.serve_call(std::move(frame), std::move(payload), (how & 2) != 0 ? kScope : kNoScope,
                         [counted](transport::Bytes) { counted(); });
    }
    // Let the io thread's and the worker pool's work finish before the next request.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    do {
      io.restart();
      io.poll();
      if (answers.all_answered()) break;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    } while (std::chrono::steady_clock::now() < deadline);
    if (!answers.all_answered()) std::abort();  // a request that cannot wait got no answer
  }
  return 0;
}
