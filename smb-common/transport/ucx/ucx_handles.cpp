#include "transport/ucx/ucx_handles.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace smb::transport::ucx {

void throw_ucx(ucs_status_t status, const std::string& what) {
  throw Error(Errc::transport, what + ": UCX error: " + ucs_status_string(status));
}

ContextPtr make_context(const char* who) {
  ucp_config_t* config = nullptr;
  check_ucx(ucp_config_read(nullptr, nullptr, &config), std::string(who) + ": reading UCX configuration");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                      UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 1;
  params.name = who;
  ucp_context_h context = nullptr;
  ucs_status_t status = ucp_init(&params, config, &context);
  ucp_config_release(config);
  check_ucx(status, std::string(who) + ": initialising UCX (check UCX_TLS and UCX_NET_DEVICES)");
  return ContextPtr(context);
}

WorkerPtr make_worker(ucp_context_h context, ucs_thread_mode_t mode) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = mode;
  ucp_worker_h worker = nullptr;
  check_ucx(ucp_worker_create(context, &params, &worker), "creating a UCX worker");
  return WorkerPtr(worker);
}

std::vector<std::uint8_t> worker_address(ucp_worker_h worker) {
  ucp_address_t* address = nullptr;
  std::size_t length = 0;
  check_ucx(ucp_worker_get_address(worker, &address, &length), "getting the UCX worker address");
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(address);
  std::vector<std::uint8_t> out(bytes, bytes + length);
  ucp_worker_release_address(worker, address);
  return out;
}

MemoryMap::MemoryMap(ucp_context_h context, void* base, std::size_t length)
    : context_(context), base_(base), length_(length) {
  // UCX's shared-memory transports can reach only memory that UCX allocated
  // itself (a registered private mapping leaves them no key, and RMA then
  // falls back to a software path that stalls). So the segment's range of the
  // pool is replaced, in place, by UCX-allocated shareable memory.
  //
  // First the range's own pages go (an inaccessible placeholder keeps the
  // addresses ours): a pool of huge pages would otherwise hold them while
  // UCX asks for its own, and with only the pool's worth reserved, UCX would
  // fall back to 4 KiB pages, which cost large transfers a third of their
  // speed on shared memory (docs/benchmarks.md, "Large regions").
  if (::mmap(base, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) ==
      MAP_FAILED)
    throw Error(Errc::no_space, "releasing " + std::to_string(length) + " bytes of the pool for UCX failed: " +
                                    std::strerror(errno));
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  params.address = base;
  params.length = length;
  params.flags = UCP_MEM_MAP_ALLOCATE | UCP_MEM_MAP_FIXED;
  const ucs_status_t status = ucp_mem_map(context_, &params, &memh_);
  if (status != UCS_OK) {
    ::mmap(base, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    throw Error(Errc::no_space, "allocating " + std::to_string(length) +
                                    " bytes of shareable memory with UCX failed (" +
                                    ucs_status_string(status) + "); is /dev/shm large enough?");
  }
  // Its pages fault in later: smbd's PoolPopulator, in the background.
}

MemoryMap::~MemoryMap() {
  if (memh_ == nullptr) return;
  ucp_mem_unmap(context_, memh_);
  // Give the pool back private pages where the shared mapping was.
  ::mmap(base_, length_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
}

std::vector<std::uint8_t> MemoryMap::pack_rkey() const {
  void* buffer = nullptr;
  std::size_t size = 0;
  check_ucx(ucp_rkey_pack(context_, memh_, &buffer, &size), "packing a UCX remote key");
  const auto* bytes = static_cast<const std::uint8_t*>(buffer);
  std::vector<std::uint8_t> out(bytes, bytes + size);
  ucp_rkey_buffer_release(buffer);
  return out;
}

ucs_status_t wait_request(ucp_worker_h worker, ucs_status_ptr_t request) {
  if (request == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
  ucs_status_t status;
  while ((status = ucp_request_check_status(request)) == UCS_INPROGRESS) ucp_worker_progress(worker);
  ucp_request_free(request);
  return status;
}

}  // namespace smb::transport::ucx
