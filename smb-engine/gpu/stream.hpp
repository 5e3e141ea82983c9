#pragma once
// The CUDA stream a GpuGroup orders its copies and collectives on (RAII).
// It is a blocking stream (cudaStreamDefault): work the caller queued on the
// legacy default stream, such as the kernels that computed the gradients,
// finishes before the group's operations on the same memory start. Work on
// other streams of the caller's must be finished (synchronised) by the caller.
#include <cuda_runtime_api.h>

#include <string>

namespace smb::gpu {

class Stream {
 public:
  explicit Stream(const std::string& where);  // on the calling thread's current device
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const noexcept { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace smb::gpu
