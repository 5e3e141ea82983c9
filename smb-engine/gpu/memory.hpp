#pragma once
// The memory of the GPU path: telling device spans from host ones, the
// page-locked host staging buffer (RAII), and copies between the two on the
// group's stream.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <string>

namespace smb::gpu {

// True where `p` is memory on `device` (cudaMalloc), or managed memory
// (cudaMallocManaged), which NCCL and the copies can use as device memory.
// Host memory, pinned or not, is not.
bool is_device_memory(const void* p, int device);
// True where `p` is plain host memory, pinned or not (what the CPU and the
// transports read and write directly); false for device and managed memory.
bool is_host_memory(const void* p);

// Page-locked host memory (cudaMallocHost): copies to and from it are DMA
// transfers, without the driver's bounce through a pinned buffer of its own.
class PinnedFloats {
 public:
  PinnedFloats(std::size_t count, const std::string& where);  // throws Errc::no_space
  ~PinnedFloats();
  PinnedFloats(const PinnedFloats&) = delete;
  PinnedFloats& operator=(const PinnedFloats&) = delete;

  std::span<float> span() noexcept { return {data_, count_}; }

 private:
  float* data_ = nullptr;
  std::size_t count_ = 0;
};

// Copy on `stream` and wait for it: the engine's calls are synchronous.
// Both throw Errc::transport with CUDA's reason.
void copy_to_host(std::span<float> host, std::span<const float> device, cudaStream_t stream,
                  const std::string& where, const char* op);
void copy_to_device(std::span<float> device, std::span<const float> host, cudaStream_t stream,
                    const std::string& where, const char* op);

}  // namespace smb::gpu
