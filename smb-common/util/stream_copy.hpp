#pragma once
// Copies for regions larger than the CPU's caches.
//
// A plain memcpy into memory that is not in the cache first reads every
// destination line (to own it), then writes it back: a third more memory
// traffic than the bytes moved. glibc's memcpy streams (non-temporal stores,
// no read) only when one copy is larger than most of the last-level cache,
// but the fabric moves a large buffer in many ops of 1 MiB, each far below
// that. Measured on shared memory (docs/benchmarks.md, "Large regions"):
// 11 GiB/s with memcpy, 20 GiB/s streamed, writing a 256 MiB buffer.
#include <cstddef>

namespace smb::util {

// The last-level cache's size in bytes (sysfs; 32 MiB when unknown).
std::size_t last_level_cache_bytes();

// memcpy with non-temporal stores on x86-64 (memcpy elsewhere); the bytes
// are visible to other CPUs when it returns (it ends with a store fence).
void stream_copy(void* dst, const void* src, std::size_t length);

}  // namespace smb::util
