#include "cuda_error.hpp"

namespace smb::gpu {

std::string cuda_text(cudaError_t result) {
  return std::string(cudaGetErrorString(result)) + " (" + cudaGetErrorName(result) + ")";
}

std::string nccl_text(ncclResult_t result) {
  std::string text = ncclGetErrorString(result);
  const char* detail = ncclGetLastError(nullptr);  // the comm argument is unused
  if (detail != nullptr && *detail != '\0') text += ": " + std::string(detail);
  return text;
}

void check_cuda(cudaError_t result, const std::string& where, const char* op, const char* call, Errc code) {
  if (result == cudaSuccess) return;
  (void)cudaGetLastError();
  throw Error(code, where + ": " + op + ": " + call + ": " + cuda_text(result));
}

void check_nccl(ncclResult_t result, const std::string& where, const char* op, const char* call, Errc code) {
  if (result == ncclSuccess) return;
  throw Error(code, where + ": " + op + ": " + call + ": " + nccl_text(result));
}

}  // namespace smb::gpu
