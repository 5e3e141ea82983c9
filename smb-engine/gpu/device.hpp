#pragma once
// Which CUDA device a thread works on, and whether one exists. The CUDA
// current device is per thread and the engine's caller owns it, so every
// entry into the GPU path makes the engine's device current for its own
// duration only (DeviceScope) and gives the caller's back.
#include <cuda_runtime_api.h>

#include <string>

namespace smb::gpu {

// Throws Errc::invalid_argument unless `device` is a usable CUDA device:
// "<where>: no CUDA device: <cudaGetErrorString> ..." where the runtime finds
// none (no GPU, no driver), or names how many there are.
void require_device(int device, const std::string& where);

class DeviceScope {
 public:
  // Never throws: a destructor uses it too. Callers that may fail check status().
  explicit DeviceScope(int device) noexcept;
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

  cudaError_t status() const noexcept { return status_; }

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

}  // namespace smb::gpu
