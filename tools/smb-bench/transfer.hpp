#pragma once
// The write and read benchmarks: passes over a range of a buffer in blocks.
#include "results.hpp"

#include <smb/client.hpp>

#include <cstdint>

namespace smb::bench {

enum class Direction { write, read };

struct TransferPlan {
  Direction direction = Direction::write;
  std::uint64_t size = 0;    // bytes [0, size) of the buffer
  std::uint64_t block = 0;   // bytes per op; the last block of a pass may be shorter
  std::uint64_t iters = 1;   // passes
  std::uint32_t depth = 1;   // ops in flight per thread; 1: synchronous calls
  std::uint32_t threads = 1; // each takes a contiguous slice of the blocks
  bool pattern = false;      // write: store the pattern; read: check every byte
  Client* registrar = nullptr;  // set: each thread registers its op memory (zero-copy where supported)
};

// Runs the plan on `buffer` (shared by the threads) and times it.
PhaseResult run_transfer(Buffer& buffer, const TransferPlan& plan);

}  // namespace smb::bench
