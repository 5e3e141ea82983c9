// The update engine's GPU path (libsmb built with SMB_WITH_CUDA): the
// engine's spans are device memory on one CUDA device; the group averages
// and broadcasts with NCCL on the group's own stream, and the root's
// exchange with the fabric goes through a page-locked host copy.
#include "gpu_group.hpp"

#include "cuda_error.hpp"
#include "device.hpp"
#include "memory.hpp"
#include "nccl_group.hpp"
#include "stream.hpp"

namespace smb::gpu {

namespace {

class CudaGroup final : public GpuGroup {
 public:
  explicit CudaGroup(const EngineConfig& config);
  ~CudaGroup() override;

  void connect(Client& client, const std::string& id_buffer, const std::string& id_barrier) override;
  void check_device_span(std::span<const float> span, const char* op) const override;
  bool is_host_span(std::span<const float> span) const override { return is_host_memory(span.data()); }
  std::span<float> staging() override { return staging_->span(); }
  void to_staging(std::span<const float> device, const char* op) override;
  void from_staging(std::span<float> device, const char* op) override;
  void allreduce_average(std::span<float> device, const char* op) override;
  void broadcast_from_root(std::span<float> device, const char* op) override;

 private:
  // The engine's device is the current one for the duration of a call only.
  void check_entered(const DeviceScope& scope, const char* op) const {
    check_cuda(scope.status(), where_, op, "cudaSetDevice");
  }
  NcclGroup& nccl(const char* op);

  EngineConfig config_;
  std::string where_;
  // Released by the destructor, in this order, on the engine's device.
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<PinnedFloats> staging_;
  std::unique_ptr<NcclGroup> nccl_;
};

CudaGroup::CudaGroup(const EngineConfig& config)
    : config_(config),
      where_("update engine '" + config.name + "' group " + std::to_string(config.group) + " rank " +
             std::to_string(config.group_rank) + " on cuda_device " + std::to_string(config.cuda_device)) {
  require_device(config_.cuda_device, where_);
  DeviceScope scope(config_.cuda_device);
  check_cuda(scope.status(), where_, "open", "cudaSetDevice", Errc::invalid_argument);
  stream_ = std::make_unique<Stream>(where_);
  staging_ = std::make_unique<PinnedFloats>(config_.parameters, where_);
}

CudaGroup::~CudaGroup() {
  DeviceScope scope(config_.cuda_device);
  nccl_.reset();
  staging_.reset();
  stream_.reset();
}

void CudaGroup::connect(Client& client, const std::string& id_buffer, const std::string& id_barrier) {
  if (nccl_) return;  // initialize() again: the group keeps its communicator
  DeviceScope scope(config_.cuda_device);
  check_entered(scope, "connect");
  NcclGroupConfig group;
  group.id_buffer = id_buffer;
  group.id_barrier = id_barrier;
  group.size = static_cast<int>(config_.group_size);
  group.rank = static_cast<int>(config_.group_rank);
  group.timeout = config_.timeout;
  group.where = where_;
  nccl_ = std::make_unique<NcclGroup>(client, group);
}

void CudaGroup::check_device_span(std::span<const float> span, const char* op) const {
  if (is_device_memory(span.data(), config_.cuda_device)) return;
  throw Error(Errc::invalid_argument, where_ + ": " + op + ": the span is not memory on CUDA device " +
                                          std::to_string(config_.cuda_device) +
                                          " (with cuda_device set, the engine's spans are device memory)");
}

void CudaGroup::to_staging(std::span<const float> device, const char* op) {
  DeviceScope scope(config_.cuda_device);
  check_entered(scope, op);
  copy_to_host(staging(), device, stream_->get(), where_, op);
}

void CudaGroup::from_staging(std::span<float> device, const char* op) {
  DeviceScope scope(config_.cuda_device);
  check_entered(scope, op);
  copy_to_device(device, staging(), stream_->get(), where_, op);
}

NcclGroup& CudaGroup::nccl(const char* op) {
  if (!nccl_) throw Error(Errc::invalid_argument, where_ + ": " + op + ": initialize() first");
  return *nccl_;
}

void CudaGroup::allreduce_average(std::span<float> device, const char* op) {
  DeviceScope scope(config_.cuda_device);
  check_entered(scope, op);
  nccl(op).allreduce_average(device, stream_->get(), op);
}

void CudaGroup::broadcast_from_root(std::span<float> device, const char* op) {
  DeviceScope scope(config_.cuda_device);
  check_entered(scope, op);
  nccl(op).broadcast_from_root(device, stream_->get(), op);
}

}  // namespace

std::unique_ptr<GpuGroup> GpuGroup::open(const EngineConfig& config) { return std::make_unique<CudaGroup>(config); }

}  // namespace smb::gpu
