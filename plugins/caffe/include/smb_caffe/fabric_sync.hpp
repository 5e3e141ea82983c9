#pragma once
// Caffe training over the Soft Memory Box fabric: a solver callback, hooked
// where Caffe's own multi-GPU sync hooks (caffe::Solver<float>::Callback),
// that drives smb::UpdateEngine over the net's learnable parameters.
//
//   on_gradients_ready  the group averages the gradients (engine.allreduce)
//   on_start            after the previous iteration's ApplyUpdate: every
//                       tau steps the group's root exchanges with the
//                       global weights (seasgd, downpour, sync) and the
//                       group adopts the result (engine.after_step); the
//                       first call makes the first worker's weights
//                       everyone's (engine.initialize)
//   finish()            the exchange after the last iteration
//
// The learnable blobs' data and diffs are re-pointed into two contiguous
// vectors (SyncedMemory::set_cpu_data, as Caffe's P2PSync does), so the
// engine reads and writes them in place: no copies per step. The
// destructor hands them memory of their own again, so the solver stays
// usable (testing, snapshots) after a FabricSync is gone.
#include <smb/update_engine.hpp>

#include <caffe/solver.hpp>

#include <memory>
#include <vector>

namespace smb::caffe_plugin {

struct SyncOptions {
  std::string name = "caffe";  // prefix of the engine's buffers (add a job id)
  UpdateMode mode = UpdateMode::seasgd;
  std::uint32_t tau = 1;
  double alpha = 0.2;
  std::uint32_t rank = 0;       // this worker among all
  std::uint32_t workers = 1;
  std::uint32_t groups = 1;     // workers / groups per group, consecutive ranks
  std::vector<std::string> group_servers;  // EngineConfig::group_servers
};

// Caffe's Solver::Callback has no virtual destructor (the solver never
// deletes its callbacks); FabricSync is owned by value by its caller.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnon-virtual-dtor"
class FabricSync : public caffe::Solver<float>::Callback {
 public:
  FabricSync(smb::Client& client, caffe::Solver<float>& solver, const SyncOptions& options);
  ~FabricSync();  // the solver's blobs get their own memory back
  FabricSync(const FabricSync&) = delete;
  FabricSync& operator=(const FabricSync&) = delete;
  // Collective over all workers: the first worker's weights become
  // everyone's. The first on_start() does it when nobody called it before.
  void initialize();
  // The exchange that follows the last iteration's update.
  void finish();
  // The global weights now (for reporting; the engine's view).
  std::vector<float> global_weights();

 protected:
  void on_start() override;
  void on_gradients_ready() override;

 private:
  caffe::shared_ptr<caffe::Net<float>> net_;  // Caffe's (boost) shared_ptr
  std::vector<caffe::Blob<float>*> params_;
  std::vector<float> data_;
  std::vector<float> diff_;
  std::unique_ptr<UpdateEngine> engine_;
  bool initialized_ = false;
  bool updated_ = false;  // an update happened since the last exchange
};
#pragma GCC diagnostic pop

// The engine configuration for `options` (groups of consecutive ranks).
EngineConfig engine_config(const SyncOptions& options, std::uint64_t parameters);

}  // namespace smb::caffe_plugin
