#pragma once
// The state behind smb::UpdateEngine (include/smb/update_engine.hpp), kept
// out of the public header: its buffers, scratch space, the pipelined pushes
// and the GPU group.
#include <smb/update_engine.hpp>

#include "peer_watch.hpp"

#include <condition_variable>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
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
  CheckpointInfo save_checkpoint(const std::string& path);

 private:
  bool root() const { return config_.group_rank == 0; }
  std::string barrier_name(const std::string& what) const;
  void group_barrier(const std::string& what);
  void exchange(std::span<float> params);
  // The pipelined exchanges work in chunks of kStripesPerChunk stripes on
  // every server of the global weights' buffer.
  static constexpr std::uint64_t kStripesPerChunk = 1;
  std::uint64_t chunk_floats() const;
  // Where the engine's buffers in the fabric go (EngineConfig::replicas).
  BufferOptions fabric_buffers() const;
  // Synchronous mode (engine_sync_exchange.cpp).
  void create_sync_buffers();
  void synchronous_exchange(std::span<float> params);
  std::uint64_t sync_chunks() const;
  // SEASGD (engine_seasgd_exchange.cpp).
  struct SeasgdPush;
  void seasgd_exchange(std::span<float> params);
  void wait_pushed(SeasgdPush& push, std::uint64_t chunks);
  void broadcast_in_group(std::span<float> params);
  void finish_pending();  // the last SEASGD push
  void resume_into(std::span<float> host);

  Client& client_;
  EngineConfig config_;
  std::unique_ptr<Client> own_group_client_;  // on config_.group_servers, when given
  Client& group_client_;                      // it, else client_
  std::uint64_t bytes_;
  std::uint64_t steps_ = 0;
  std::uint64_t exchanges_ = 0;
  std::uint64_t allreduces_ = 0;
  static constexpr std::uint64_t kGroupSums = 2;  // alternating allreduce sums in the group area
  Buffer global_;
  Buffer delta_;       // downpour: this group's delta area (roots)
  // kGroupSums sums, a broadcast slot and a region of zeros, each region
  // group_stride_ bytes (bytes_ rounded up to stripe unit x servers), so that
  // the zeros lie on the same servers as any sum's same place and a sum is
  // zeroed by the servers (apply_from copy) instead of sent zeros.
  Buffer group_area_;
  std::uint64_t group_stride_ = 0;
  Buffer sums_[2];     // synchronous mode: alternating sums
  Buffer ready_;       // synchronous mode: per chunk, how many roots have added it
  std::vector<float> scratch_;
  std::vector<float> push_;             // what the pushes send (SEASGD: kept until pushed)
  std::vector<float> last_pull_;        // downpour
  std::shared_ptr<SeasgdPush> seasgd_push_;  // the last SEASGD exchange's push, overlapping what follows
  std::unique_ptr<gpu::GpuGroup> gpu_;  // cuda_device >= 0: NCCL group, stream, host staging
  // This worker's liveness lock, and the probes of the others' once every
  // worker has one (after initialize()'s barrier): a wait on a dead worker
  // fails within about a second, naming it.
  std::unique_ptr<PeerWatch> watch_;
  bool initialized_ = false;
  // Synchronous mode, group 0: the last exchange's sum being zeroed on the
  // servers. Last, so that it is waited for before the buffers go.
  std::future<void> zeroing_;
};

}  // namespace detail
}  // namespace smb
