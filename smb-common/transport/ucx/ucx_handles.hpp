#pragma once
// RAII owners of UCX objects, and the error helper both sides use.
#include <smb/error.hpp>

#include <ucp/api/ucp.h>

#include <memory>
#include <string>
#include <vector>

namespace smb::transport::ucx {

[[noreturn]] void throw_ucx(ucs_status_t status, const std::string& what);
inline void check_ucx(ucs_status_t status, const std::string& what) {
  if (status != UCS_OK) throw_ucx(status, what);
}

struct ContextDeleter { void operator()(ucp_context_h c) const { ucp_cleanup(c); } };
struct WorkerDeleter { void operator()(ucp_worker_h w) const { ucp_worker_destroy(w); } };
struct RkeyDeleter { void operator()(ucp_rkey_h k) const { ucp_rkey_destroy(k); } };

using ContextPtr = std::unique_ptr<std::remove_pointer_t<ucp_context_h>, ContextDeleter>;
using WorkerPtr = std::unique_ptr<std::remove_pointer_t<ucp_worker_h>, WorkerDeleter>;
using RkeyPtr = std::unique_ptr<std::remove_pointer_t<ucp_rkey_h>, RkeyDeleter>;

// A context with the features the fabric uses (RMA, 64-bit atomics, active
// messages, wake-up on events), shared by threads.
ContextPtr make_context(const char* who);
WorkerPtr make_worker(ucp_context_h context, ucs_thread_mode_t mode);

// A worker's own address, copied out so the UCX buffer can be released.
std::vector<std::uint8_t> worker_address(ucp_worker_h worker);

// A segment's memory, allocated by UCX in place over a page-aligned range of
// the pool (ucp_mem_map / ucp_mem_unmap); the range gets fresh zeroed pages.
class MemoryMap {
 public:
  MemoryMap(ucp_context_h context, void* base, std::size_t length);
  ~MemoryMap();
  MemoryMap(const MemoryMap&) = delete;
  MemoryMap& operator=(const MemoryMap&) = delete;
  ucp_mem_h handle() const { return memh_; }
  std::vector<std::uint8_t> pack_rkey() const;

 private:
  ucp_context_h context_;
  void* base_;
  std::size_t length_;
  ucp_mem_h memh_ = nullptr;
};

// Waits (progressing `worker`) for a request returned by a *_nbx call.
ucs_status_t wait_request(ucp_worker_h worker, ucs_status_ptr_t request);

}  // namespace smb::transport::ucx
