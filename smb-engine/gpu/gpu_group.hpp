#pragma once
// The GPU state of an UpdateEngine whose spans are device memory
// (EngineConfig::cuda_device >= 0). This header includes nothing from CUDA:
// update_engine.cpp uses it in every build. gpu_group.cpp implements it with
// the CUDA runtime and NCCL; without CUDA, gpu_group_disabled.cpp only
// refuses, saying how to build libsmb with it.
#include <smb/update_engine.hpp>

#include <memory>
#include <span>
#include <string>

namespace smb::gpu {

class GpuGroup {
 public:
  // Checks that the engine's device exists and sets up its stream and host
  // staging; no collective yet. Throws Errc::invalid_argument when libsmb
  // was built without CUDA, or when there is no such CUDA device.
  static std::unique_ptr<GpuGroup> open(const EngineConfig& config);

  virtual ~GpuGroup() = default;

  // Collective over the group's members: the NCCL communicator. Its id
  // goes from the group root to the members through the fabric: the root
  // writes it into buffer `id_buffer`, the group meets at barrier
  // `id_barrier`, the members read it. Does nothing the second time.
  virtual void connect(Client& client, const std::string& id_buffer, const std::string& id_barrier) = 0;
  // Throws Errc::invalid_argument unless `span` is memory on the engine's
  // device (a host vector handed to a GPU engine would crash NCCL).
  virtual void check_device_span(std::span<const float> span, const char* op) const = 0;
  // Whether `span` is plain host memory (pinned or not), which the fabric
  // reads into directly: where global_weights may land instead of the device.
  virtual bool is_host_span(std::span<const float> span) const = 0;
  // Page-locked host memory of `parameters` floats: where the root exchanges
  // with the fabric (and global_weights lands) before going to the device.
  virtual std::span<float> staging() = 0;
  virtual void to_staging(std::span<const float> device, const char* op) = 0;
  virtual void from_staging(std::span<float> device, const char* op) = 0;
  // NCCL collectives over the group, in place; synchronous like the engine.
  virtual void allreduce_average(std::span<float> device, const char* op) = 0;
  virtual void broadcast_from_root(std::span<float> device, const char* op) = 0;
};

}  // namespace smb::gpu
