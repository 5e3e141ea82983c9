#pragma once
/// @file
/// The update engine: data-parallel training over the fabric, framework
/// agnostic (a flat float parameter vector; plugins map tensors onto it).
///
/// Workers form groups (e.g. the GPUs of one node). Every step, a group
/// averages its gradients synchronously (allreduce). Every `tau` steps the
/// group's root exchanges with global weights held in the fabric, by the
/// configured mode, and the group adopts the root's result:
///   seasgd       elastic averaging (ETRI's SEASGD): dW = alpha (W - Wg);
///                W -= dW; the servers add dW into Wg. Pipelined by chunk:
///                each chunk's dW goes to the servers as soon as it is
///                computed, overlapping the rest of the exchange and the
///                next steps; a chunk of Wg is read only once this root's
///                previous dW for it is in.
///   downpour     asynchronous push of W - W_at_last_pull into Wg, then pull Wg.
///   synchronous  every root pushes W / groups into a sum, barrier, all pull.
/// Global weights start as the first worker's (a broadcast through the
/// fabric); read the final averaged model with global_weights().
///
/// GPU groups (EngineConfig::cuda_device >= 0, libsmb built with CUDA and
/// NCCL): every span given to the engine is device memory on that device,
/// except that global_weights() also reads into host memory. The group averages and broadcasts with
/// NCCL; the root's exchange with the global weights goes through a host copy.
/// The engine's copies and collectives run on a stream of its own that waits
/// for the legacy default stream; work of the caller's on other streams must
/// be finished before a call. Calls return when the result is in the spans.
#include <smb/client.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace smb {

enum class UpdateMode { seasgd, downpour, synchronous };

struct EngineConfig {
  std::string name;               ///< prefix of the engine's buffers and barriers
  std::uint64_t parameters = 0;   ///< floats in the parameter vector
  std::uint32_t groups = 1;
  std::uint32_t group = 0;        ///< this worker's group
  std::uint32_t group_size = 1;
  std::uint32_t group_rank = 0;   ///< 0: the group's root
  UpdateMode mode = UpdateMode::seasgd;
  double alpha = 0.2;             ///< seasgd moving rate
  std::uint32_t tau = 1;          ///< steps between exchanges with the global weights
  /// Longest wait at a barrier. A wait on a worker that died (after
  /// initialize()) fails sooner: within about a second, with
  /// Errc::unreachable naming its group and rank (every worker holds a
  /// liveness lock, <name>/alive/<group>/<rank>). The asynchronous modes
  /// never wait on other groups: they go on when one dies.
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
  /// Copies of the engine's buffers in the fabric (BufferOptions::replicas):
  /// with 2, training goes on when a memory server is lost after
  /// initialize() (barriers and a group's own servers are not replicated;
  /// docs/reliability.md, "Replication").
  std::uint32_t replicas = 1;
  /// -1: the spans are host memory, and the group reduces through the fabric.
  /// >= 0: the spans are device memory on this CUDA device, and the group
  /// all-reduces and broadcasts with NCCL. Needs libsmb built with CUDA
  /// (SMB_WITH_CUDA) and the device present: the constructor says which is
  /// missing (Errc::invalid_argument).
  int cuda_device = -1;
  /// Memory servers for the group's own buffers and barriers (the averaging
  /// sums and the broadcast slot), as "host:port"; empty: the client's
  /// servers. Give each group a server on its own node (an smbd on
  /// loopback) and the group averages over shared memory, as GPU groups do
  /// over NCCL, while only the roots' exchange crosses the network.
  std::vector<std::string> group_servers;
  /// The transport to the group's own servers (one of SMB_TRANSPORTS), so a
  /// node can average over shared memory ("ucx") while the fabric runs on
  /// another ("tcp" across hosts); their smbd must serve it. Empty:
  /// $SMB_GROUP_TRANSPORT, else the client's default ($SMB_TRANSPORT, else
  /// "ucx"). Only with group_servers.
  std::string group_transport;
  /// A checkpoint file (UpdateEngine::save_checkpoint): initialize() starts
  /// the global weights, and so every worker, from it instead of the first
  /// worker's parameters. Its size must match `parameters`; a damaged file
  /// fails initialize() on the first worker before anything is written.
  std::string resume_from;
};

namespace detail {
class EngineCore;  ///< smb-engine/engine_core.hpp
}

class UpdateEngine {
 public:
  UpdateEngine(Client& client, EngineConfig config);
  ~UpdateEngine();
  UpdateEngine(const UpdateEngine&) = delete;
  UpdateEngine& operator=(const UpdateEngine&) = delete;

  /// Collective over all workers: the first worker's `params` become the
  /// global weights and everyone's starting point.
  void initialize(std::span<float> params);
  /// Averages `grads` over the group (every member calls it every step).
  void allreduce(std::span<float> grads);
  /// After the local optimizer step: every tau steps the root exchanges with
  /// the global weights and the group adopts the root's parameters.
  void after_step(std::span<float> params);
  /// The global weights as they are now (waits for this worker's pending
  /// update). With cuda_device set, `out` is device memory on that device
  /// or host memory.
  void global_weights(std::span<float> out);
  /// Writes the global weights to a checkpoint file (Client::save); resume
  /// with EngineConfig::resume_from. Exchanges do not take the buffer's
  /// lock, so call it where none is in flight (e.g. after a barrier of all
  /// workers, or when training is done): a save that overlaps an exchange is
  /// only best effort (docs/reliability.md, "Checkpoints").
  CheckpointInfo save_checkpoint(const std::string& path);

 private:
  std::unique_ptr<detail::EngineCore> core_;
};

}  // namespace smb
