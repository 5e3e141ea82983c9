#pragma once
// The fetch-add benchmark: 64-bit atomic adds on the words of a buffer.
#include "results.hpp"

#include <smb/client.hpp>

#include <cstdint>

namespace smb::bench {

// Each of `threads` threads adds 1 to word (i mod words), i = 0 .. iters-1.
PhaseResult run_fetch_add(Buffer& buffer, std::uint64_t words, std::uint64_t iters, std::uint32_t threads);

// The words that run_fetch_add touches: min(words, iters).
std::uint64_t touched_words(std::uint64_t words, std::uint64_t iters);
// Zeroes words [0, count) of the buffer.
void zero_words(Buffer& buffer, std::uint64_t count);
// The sum (mod 2^64) of words [0, count) of the buffer.
std::uint64_t sum_words(Buffer& buffer, std::uint64_t count);

}  // namespace smb::bench
