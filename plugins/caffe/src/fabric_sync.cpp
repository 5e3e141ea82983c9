#include "smb_caffe/fabric_sync.hpp"

#include <smb/error.hpp>

#include <algorithm>
#include <cstring>
#include <map>

namespace smb::caffe_plugin {

EngineConfig engine_config(const SyncOptions& o, std::uint64_t parameters) {
  if (o.workers == 0 || o.groups == 0 || o.workers % o.groups != 0)
    throw Error(Errc::invalid_argument, std::to_string(o.workers) + " workers cannot form " +
                                            std::to_string(o.groups) + " equal groups");
  EngineConfig c;
  c.name = o.name;
  c.parameters = parameters;
  c.groups = o.groups;
  c.group_size = o.workers / o.groups;
  c.group = o.rank / c.group_size;
  c.group_rank = o.rank % c.group_size;
  c.mode = o.mode;
  c.alpha = o.alpha;
  c.tau = o.tau;
  c.group_servers = o.group_servers;
  return c;
}

FabricSync::FabricSync(smb::Client& client, caffe::Solver<float>& solver, const SyncOptions& options)
    : net_(solver.net()) {
  params_ = net_->learnable_params();
  std::uint64_t total = 0;
  for (const auto* blob : params_) total += static_cast<std::uint64_t>(blob->count());
  data_.resize(total);
  diff_.resize(total);
  // Point every blob into the contiguous vectors, keeping its current values.
  float* data = data_.data();
  float* diff = diff_.data();
  for (auto* blob : params_) {
    const auto n = static_cast<std::size_t>(blob->count());
    std::memcpy(data, blob->cpu_data(), n * sizeof(float));
    blob->data()->set_cpu_data(data);
    std::memcpy(diff, blob->cpu_diff(), n * sizeof(float));
    blob->diff()->set_cpu_data(diff);
    data += n;
    diff += n;
  }
  engine_ = std::make_unique<UpdateEngine>(client, engine_config(options, total));
}

// The net outlives this object: every blob that points into data_ or diff_
// (the learnable ones and any layer sharing them) gets memory of its own
// again, holding the same values. Test nets re-share before they test.
FabricSync::~FabricSync() {
  std::map<const caffe::SyncedMemory*, std::shared_ptr<caffe::Blob<float>>> owned;
  for (auto* blob : params_) {
    auto own = std::make_shared<caffe::Blob<float>>(blob->shape());
    std::memcpy(own->mutable_cpu_data(), blob->cpu_data(), static_cast<std::size_t>(blob->count()) * sizeof(float));
    std::memcpy(own->mutable_cpu_diff(), blob->cpu_diff(), static_cast<std::size_t>(blob->count()) * sizeof(float));
    owned[blob->data().get()] = own;
  }
  for (const auto& blob : net_->params()) {
    if (auto it = owned.find(blob->data().get()); it != owned.end()) {
      blob->ShareData(*it->second);
      blob->ShareDiff(*it->second);
    }
  }
}

void FabricSync::initialize() {
  if (initialized_) return;
  engine_->initialize(data_);  // the first worker's weights become everyone's
  initialized_ = true;
}

void FabricSync::on_start() {
  if (!initialized_) {
    initialize();
    return;
  }
  if (updated_) {
    engine_->after_step(data_);
    updated_ = false;
  }
}

void FabricSync::on_gradients_ready() {
  engine_->allreduce(diff_);
  updated_ = true;  // ApplyUpdate follows
}

void FabricSync::finish() {
  if (updated_) {
    engine_->after_step(data_);
    updated_ = false;
  }
}

std::vector<float> FabricSync::global_weights() {
  std::vector<float> out(data_.size());
  engine_->global_weights(out);
  return out;
}

}  // namespace smb::caffe_plugin
