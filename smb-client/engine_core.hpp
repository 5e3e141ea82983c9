#pragma once
// The state behind smb::UpdateEngine (include/smb/update_engine.hpp), kept
// out of the public header: its buffers, scratch space, the overlapped push
// and the GPU group.
#include <smb/update_engine.hpp>

#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace smb {

namespace gpu {
class GpuGroup;  // gpu/: CUDA and NCCL, where libsmb is built with them
}

namespace detail {

class EngineCore {
 public:
  EngineCore(Client& client, EngineConfig config);
  ~EngineCore();

  void initialize(std::span<float> params);
  void allreduce(std::span<float> grads);
  void after_step(std::span<float> params);
  void global_weights(std::span<float> out);

 private:
  bool root() const { return config_.group_rank == 0; }
  std::string barrier_name(const std::string& what) const;
  void group_barrier(const std::string& what);
  void exchange(std::span<float> params);
  // Synchronous mode, pipelined (engine_sync_exchange.cpp).
  void create_sync_buffers();
  void synchronous_exchange(std::span<float> params);
  std::uint64_t sync_chunks() const;
  static constexpr std::uint64_t kSyncChunkFloats = 256 * 1024;  // 1 MiB: a stripe, one call
  void broadcast_in_group(std::span<float> params);
  void finish_pending();

  Client& client_;
  EngineConfig config_;
  std::uint64_t bytes_;
  std::uint64_t steps_ = 0;
  std::uint64_t exchanges_ = 0;
  std::uint64_t allreduces_ = 0;
  static constexpr std::uint64_t kGroupSums = 2;  // alternating allreduce sums in the group area
  Buffer global_;
  Buffer delta_;       // this group's delta area (roots)
  Buffer group_area_;  // kGroupSums sums + a broadcast slot
  Buffer sums_[2];     // synchronous mode: alternating sums
  Buffer ready_;       // synchronous mode: per chunk, how many roots have added it
  std::vector<float> scratch_;
  std::vector<float> push_;             // what the overlapped push sends (kept until it is done)
  std::vector<float> last_pull_;        // downpour
  std::future<void> pending_;           // seasgd/downpour: the overlapped push
  std::unique_ptr<gpu::GpuGroup> gpu_;  // cuda_device >= 0: NCCL group, stream, host staging
};

}  // namespace detail
}  // namespace smb
