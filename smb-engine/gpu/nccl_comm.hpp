#pragma once
// One NCCL communicator (RAII). It is created non-blocking so that every
// wait on it has a deadline, as every other wait in libsmb has: a member that
// dies or never calls gives the others Errc::timeout, not a hang. Healthy,
// it is released with ncclCommFinalize + ncclCommDestroy; after an error or a
// missed deadline it is aborted (ncclCommAbort), which waits for nobody.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <smb/error.hpp>

#include <chrono>
#include <string>

namespace smb::gpu {

class NcclComm {
 public:
  // Joins communicator `id` as `rank` of `size` on the calling thread's
  // current device; returns once every rank has joined.
  NcclComm(const ncclUniqueId& id, int size, int rank, std::chrono::milliseconds timeout, std::string where);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // The communicator; throws if an earlier error aborted it.
  ncclComm_t get(const char* op) const;
  // `result` is what enqueuing `call` on `stream` returned: waits until NCCL
  // has enqueued it and the stream has run it.
  void finish(ncclResult_t result, cudaStream_t stream, const char* op, const char* call);

 private:
  // Polls the communicator's state, then `stream` (when given), until both
  // are done; an error or the deadline aborts the communicator and throws.
  void wait(const cudaStream_t* stream, const char* op, const char* call);
  [[noreturn]] void abort_and_throw(Errc code, const std::string& what);

  ncclComm_t comm_ = nullptr;
  std::chrono::milliseconds timeout_;
  std::string where_;
};

}  // namespace smb::gpu
