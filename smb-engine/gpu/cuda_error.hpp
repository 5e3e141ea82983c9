#pragma once
// CUDA runtime and NCCL failures as smb::Error. The message says where (the
// engine, its group and rank), which operation and which call failed, and
// CUDA's or NCCL's own words. Failures while moving data are
// Errc::transport: for the group, CUDA and NCCL are the data path.
#include <smb/error.hpp>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

namespace smb::gpu {

// "<cudaGetErrorString> (<cudaGetErrorName>)"
std::string cuda_text(cudaError_t result);
// "<ncclGetErrorString>", plus ncclGetLastError's detail where it has one.
std::string nccl_text(ncclResult_t result);

// Throws "<where>: <op>: <call>: <text>" unless the call succeeded. Clears
// the thread's last CUDA error, so that it does not resurface in a later,
// unrelated call.
void check_cuda(cudaError_t result, const std::string& where, const char* op, const char* call,
                Errc code = Errc::transport);
void check_nccl(ncclResult_t result, const std::string& where, const char* op, const char* call,
                Errc code = Errc::transport);

}  // namespace smb::gpu
