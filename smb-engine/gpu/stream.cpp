#include "stream.hpp"

#include "cuda_error.hpp"

namespace smb::gpu {

Stream::Stream(const std::string& where) {
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamDefault), where, "open", "cudaStreamCreateWithFlags");
}

Stream::~Stream() {
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

}  // namespace smb::gpu
