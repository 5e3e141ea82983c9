#include "device.hpp"

#include "cuda_error.hpp"

namespace smb::gpu {

void require_device(int device, const std::string& where) {
  int count = 0;
  const cudaError_t result = cudaGetDeviceCount(&count);
  if (result != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error(Errc::invalid_argument, where + ": no CUDA device: " + cuda_text(result) +
                                            " (cudaGetDeviceCount; is there a GPU, and its driver?)");
  }
  if (count == 0) throw Error(Errc::invalid_argument, where + ": no CUDA device: cudaGetDeviceCount found none");
  if (device >= count)
    throw Error(Errc::invalid_argument, where + ": there is no CUDA device " + std::to_string(device) + ", only " +
                                            std::to_string(count) + " (0 to " + std::to_string(count - 1) + ")");
}

DeviceScope::DeviceScope(int device) noexcept {
  if ((status_ = cudaGetDevice(&previous_)) != cudaSuccess) {
    previous_ = -1;
    return;
  }
  if (previous_ != device) status_ = cudaSetDevice(device);
}

DeviceScope::~DeviceScope() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

}  // namespace smb::gpu
