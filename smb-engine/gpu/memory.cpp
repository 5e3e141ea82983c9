#include "memory.hpp"

#include "cuda_error.hpp"

namespace smb::gpu {

bool is_device_memory(const void* p, int device) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    (void)cudaGetLastError();  // e.g. a pointer CUDA never saw, on an older runtime
    return false;
  }
  if (attributes.type == cudaMemoryTypeManaged) return true;
  return attributes.type == cudaMemoryTypeDevice && attributes.device == device;
}

bool is_host_memory(const void* p) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    (void)cudaGetLastError();  // a pointer CUDA never saw, on an older runtime: malloc'd host memory
    return true;
  }
  return attributes.type == cudaMemoryTypeHost || attributes.type == cudaMemoryTypeUnregistered;
}

PinnedFloats::PinnedFloats(std::size_t count, const std::string& where) : count_(count) {
  void* p = nullptr;
  check_cuda(cudaMallocHost(&p, count * sizeof(float)), where, "host staging", "cudaMallocHost", Errc::no_space);
  data_ = static_cast<float*>(p);
}

PinnedFloats::~PinnedFloats() {
  if (data_ != nullptr) (void)cudaFreeHost(data_);
}

namespace {

void copy(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream,
          const std::string& where, const char* op) {
  check_cuda(cudaMemcpyAsync(to, from, bytes, kind, stream), where, op, "cudaMemcpyAsync");
  check_cuda(cudaStreamSynchronize(stream), where, op, "cudaStreamSynchronize after a copy");
}

}  // namespace

void copy_to_host(std::span<float> host, std::span<const float> device, cudaStream_t stream,
                  const std::string& where, const char* op) {
  copy(host.data(), device.data(), device.size_bytes(), cudaMemcpyDeviceToHost, stream, where, op);
}

void copy_to_device(std::span<float> device, std::span<const float> host, cudaStream_t stream,
                    const std::string& where, const char* op) {
  copy(device.data(), host.data(), host.size_bytes(), cudaMemcpyHostToDevice, stream, where, op);
}

}  // namespace smb::gpu
