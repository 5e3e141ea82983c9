#pragma once
// The small-op latency benchmarks beside fetch-add: compare-and-swap, a
// version notify/wait ping-pong, and barriers.
#include "results.hpp"

#include <smb/client.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace smb::bench {

// Each of `threads` threads increments word (i mod words) by compare-and-swap,
// i = 0 .. iters-1 (retrying with the value it found; each CAS is one op).
// `swaps` gets the successful CASes (the words' sum grows by exactly that).
PhaseResult run_compare_swap(Buffer& buffer, std::uint64_t words, std::uint64_t iters, std::uint32_t threads,
                             std::uint64_t& swaps);

// Two threads play ping-pong through the buffer's version: each bumps it
// (a server-side accumulate of one f32 at offset 0) and waits for the other
// to bump it back. One sample per exchange: half the round trip, i.e. the
// time from one side's notify until the other side wakes and notifies.
PhaseResult run_notify(Buffer& buffer, Buffer& peer, std::uint64_t iters, std::chrono::milliseconds timeout);

// `threads` threads of this process, with others elsewhere up to `parties`,
// meet at barrier `name` `iters` times. One sample per barrier and thread.
PhaseResult run_barrier(Client& client, const std::string& name, std::uint32_t parties, std::uint64_t iters,
                        std::uint32_t threads, std::chrono::milliseconds timeout);

}  // namespace smb::bench
