#include "nccl_comm.hpp"

#include "cuda_error.hpp"

#include <thread>

namespace smb::gpu {

namespace {

// A collective on one node takes microseconds to milliseconds: yield at
// first, then poll at a pace that costs little CPU.
void pause(unsigned polls) {
  if (polls < 1000)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(100));
}

}  // namespace

NcclComm::NcclComm(const ncclUniqueId& id, int size, int rank, std::chrono::milliseconds timeout, std::string where)
    : timeout_(timeout), where_(std::move(where)) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t result = ncclCommInitRankConfig(&comm_, size, id, rank, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    if (comm_ != nullptr) (void)ncclCommAbort(comm_);
    comm_ = nullptr;
    check_nccl(result, where_, "connect", "ncclCommInitRankConfig");
  }
  wait(nullptr, "connect", "ncclCommInitRankConfig");
}

NcclComm::~NcclComm() {
  if (comm_ == nullptr) return;
  // Finalizing waits until the peers are quiescent too; one that is gone
  // would keep it waiting, so it gets the deadline of every other wait.
  ncclResult_t state = ncclCommFinalize(comm_);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (unsigned polls = 0; state == ncclSuccess || state == ncclInProgress; ++polls) {
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclInternalError;
    if (state != ncclInProgress || std::chrono::steady_clock::now() >= deadline) break;
    pause(polls);
  }
  if (state == ncclSuccess)
    (void)ncclCommDestroy(comm_);
  else
    (void)ncclCommAbort(comm_);
}

ncclComm_t NcclComm::get(const char* op) const {
  if (comm_ == nullptr)
    throw Error(Errc::transport, where_ + ": " + op + ": the group's NCCL communicator was aborted by an earlier error");
  return comm_;
}

void NcclComm::finish(ncclResult_t result, cudaStream_t stream, const char* op, const char* call) {
  if (result != ncclSuccess && result != ncclInProgress)
    abort_and_throw(Errc::transport, std::string(op) + ": " + call + ": " + nccl_text(result));
  wait(&stream, op, call);
}

void NcclComm::wait(const cudaStream_t* stream, const char* op, const char* call) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (unsigned polls = 0;; ++polls) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t queried = ncclCommGetAsyncError(comm_, &state);
    if (queried != ncclSuccess)
      abort_and_throw(Errc::transport, std::string(op) + ": ncclCommGetAsyncError: " + nccl_text(queried));
    if (state != ncclSuccess && state != ncclInProgress)
      abort_and_throw(Errc::transport, std::string(op) + ": " + call + ": " + nccl_text(state));
    // Nothing may run on the stream before NCCL has enqueued its part.
    if (state == ncclSuccess) {
      if (stream == nullptr) return;
      const cudaError_t done = cudaStreamQuery(*stream);
      if (done == cudaSuccess) return;
      if (done != cudaErrorNotReady) {
        (void)cudaGetLastError();
        abort_and_throw(Errc::transport, std::string(op) + ": " + call + ": cudaStreamQuery: " + cuda_text(done));
      }
    }
    if (std::chrono::steady_clock::now() >= deadline)
      abort_and_throw(Errc::timeout, std::string(op) + ": " + call + " not done after " +
                                         std::to_string(timeout_.count()) +
                                         " ms (is every member of the group calling it, and alive?)");
    pause(polls);
  }
}

void NcclComm::abort_and_throw(Errc code, const std::string& what) {
  // Nothing can be assumed about enqueued operations after an error: the
  // communicator is of no further use, and aborting it frees it at once.
  if (comm_ != nullptr) (void)ncclCommAbort(comm_);
  comm_ = nullptr;
  throw Error(code, where_ + ": " + what);
}

}  // namespace smb::gpu
