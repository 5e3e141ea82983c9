// libsmb built without CUDA (SMB_WITH_CUDA=OFF): an engine on device memory
// is refused at construction, with the way to get one.
#include "gpu_group.hpp"

#include <string>

namespace smb::gpu {

std::unique_ptr<GpuGroup> GpuGroup::open(const EngineConfig& config) {
  throw Error(Errc::invalid_argument, "update engine '" + config.name + "': cuda_device " +
                                          std::to_string(config.cuda_device) +
                                          ": libsmb was built without CUDA (configure with -DSMB_WITH_CUDA=ON; "
                                          "needs CUDA and NCCL)");
}

}  // namespace smb::gpu
