// The update engine (include/smb/update_engine.hpp) on top of the public
// API: buffers, server-side accumulate, barriers. Buffers, under the
// engine's name:
//   NAME/global        the global weights Wg
//   NAME/delta/G       downpour: group G's delta area, written one-sided,
//                      then accumulated into Wg by the servers
//   NAME/group/G       group G's slots: two alternating sums (allreduce:
//                      every member accumulates its gradients into one on
//                      the servers and reads the sum back) and one the root
//                      broadcasts through
//   NAME/sum/0, /1     synchronous mode: alternating sums of the roots' W
//   NAME/ready         synchronous mode: per chunk, the roots that added it
//                      (engine_sync_exchange.cpp)
//   NAME/nccl-id/G     GPU groups: the NCCL id the root hands its members
// GPU groups (cuda_device >= 0) replace the group's slots with NCCL
// (gpu/gpu_group.hpp); the root exchanges through a host copy of W.
#include "engine_core.hpp"

#include "gpu/gpu_group.hpp"

#include <cstdlib>
#include <stdexcept>

namespace smb {
namespace detail {

namespace {

std::span<const std::byte> bytes_of(std::span<const float> v) { return std::as_bytes(v); }
std::span<std::byte> bytes_of(std::span<float> v) { return std::as_writable_bytes(v); }

}  // namespace

namespace {
// The group's own client, on its own servers (EngineConfig::group_servers).
std::unique_ptr<Client> group_client_on(const EngineConfig& config) {
  if (config.group_servers.empty()) return nullptr;
  ClientOptions options;
  options.servers = config.group_servers;
  options.timeout = config.timeout;
  options.transport = config.group_transport;
  if (const char* env = std::getenv("SMB_GROUP_TRANSPORT"); options.transport.empty() && env != nullptr)
    options.transport = env;  // still empty: the client's own default
  return std::make_unique<Client>(options);
}
}  // namespace

EngineCore::EngineCore(Client& client, EngineConfig config)
    : client_(client),
      config_(std::move(config)),
      own_group_client_(group_client_on(config_)),
      group_client_(own_group_client_ ? *own_group_client_ : client_),
      bytes_(config_.parameters * sizeof(float)) {
  const std::uint64_t stripes = BufferOptions{}.stripe_unit * group_client_.servers().size();
  group_stride_ = (bytes_ + stripes - 1) / stripes * stripes;
  const auto& c = config_;
  auto bad = [&](const std::string& why) { throw Error(Errc::invalid_argument, "update engine '" + c.name + "': " + why); };
  if (c.parameters == 0) bad("no parameters");
  if (c.groups == 0 || c.group >= c.groups) bad("group must be below groups");
  if (c.group_size == 0 || c.group_rank >= c.group_size) bad("group_rank must be below group_size");
  if (c.tau == 0) bad("tau must be at least 1");
  if (!(c.alpha > 0 && c.alpha <= 1)) bad("alpha must be in (0, 1]");
  if (c.cuda_device < -1) bad("cuda_device must be -1 (host memory) or a CUDA device number");
  if (!c.group_transport.empty() && c.group_servers.empty())
    bad("group_transport '" + c.group_transport + "' is for group_servers, and none are given");
  if (c.cuda_device >= 0) gpu_ = gpu::GpuGroup::open(config_);
  scratch_.resize(static_cast<std::size_t>(c.parameters));  // Wg, in exchanges
  watch_ = std::make_unique<PeerWatch>(client_, config_);
}

EngineCore::~EngineCore() {
  try {
    finish_pending();
  } catch (const Error&) {
    // a failed push: its error was the caller's to see at the next exchange
  }
}

std::string EngineCore::barrier_name(const std::string& what) const {
  return config_.name + "/g" + std::to_string(config_.group) + "/" + what;
}

void EngineCore::group_barrier(const std::string& what) {
  if (config_.group_size <= 1) return;
  // Before initialize() is through, a worker still starting has no liveness
  // lock yet: only then does the barrier wait without probes.
  if (initialized_)
    watch_->barrier(group_client_, barrier_name(what), config_.group_size, what);
  else
    group_client_.barrier(barrier_name(what), config_.group_size, config_.timeout);
}

// The engine's buffers are striped with the default stripe unit over all
// of the client's servers (every root is given the same servers).
std::uint64_t EngineCore::chunk_floats() const {
  return BufferOptions{}.stripe_unit / sizeof(float) * client_.servers().size() * kStripesPerChunk;
}

BufferOptions EngineCore::fabric_buffers() const {
  BufferOptions o;
  o.replicas = config_.replicas;
  return o;
}

void EngineCore::initialize(std::span<float> params) {
  if (params.size() != config_.parameters) throw Error(Errc::invalid_argument, "initialize: wrong parameter count");
  const auto& c = config_;
  const std::string group = std::to_string(c.group);
  // GPU groups: the fabric sees a host copy of the device parameters.
  std::span<float> host = params;
  if (gpu_) {
    gpu_->check_device_span(params, "initialize");
    gpu_->connect(group_client_, c.name + "/nccl-id/" + group, barrier_name("nccl-id"));
    host = gpu_->staging();
    if (root() && c.group == 0) gpu_->to_staging(params, "initialize");
  }
  if (root()) {
    if (!gpu_ && c.group_size > 1) {  // a group of one has nothing to reduce or broadcast
      group_area_ = group_client_.open_or_create(c.name + "/group/" + group, group_stride_ * (kGroupSums + 2),
                                                 c.group_servers.empty() ? fabric_buffers() : BufferOptions{});
      // The sums start at zero, and the zeros region stays so (scale by 0
      // would keep a NaN).
      const std::vector<std::byte> zeros(bytes_);
      for (std::uint64_t region = 0; region < kGroupSums; ++region) group_area_.write(region * group_stride_, zeros);
      group_area_.write((kGroupSums + 1) * group_stride_, zeros);
    }
    if (c.mode == UpdateMode::downpour) delta_ = client_.open_or_create(c.name + "/delta/" + group, bytes_, fabric_buffers());
    if (c.group == 0) {
      global_ = client_.open_or_create(c.name + "/global", bytes_, fabric_buffers());
      if (!c.resume_from.empty()) resume_into(host);
      global_.write(0, bytes_of(std::span<const float>(host)));
    }
    if (c.mode == UpdateMode::synchronous) create_sync_buffers();
  }
  client_.barrier(c.name + "/init", c.groups * c.group_size, c.timeout);
  initialized_ = true;  // every worker holds its liveness lock now
  if (!global_.valid()) global_ = client_.open(c.name + "/global");
  if (!gpu_ && c.group_size > 1 && !group_area_.valid()) group_area_ = group_client_.open(c.name + "/group/" + group);
  global_.read(0, bytes_of(host));
  if (gpu_) gpu_->from_staging(params, "initialize");
  if (c.mode == UpdateMode::downpour && root()) last_pull_.assign(host.begin(), host.end());
}

void EngineCore::allreduce(std::span<float> grads) {
  if (grads.size() != config_.parameters) throw Error(Errc::invalid_argument, "allreduce: wrong parameter count");
  if (gpu_) {
    gpu_->check_device_span(grads, "allreduce");
    gpu_->allreduce_average(grads, "allreduce");
    return;
  }
  if (config_.group_size == 1) return;
  // The servers add: each member sends its gradients once (accumulate) and
  // reads the sum once, 2x the data whatever the group size (reading every
  // member's slot would be group_size x). The sums alternate, so that the
  // one just read can be zeroed while the next step uses the other: each
  // member zeroes its share after the last read, and the next step's
  // barriers order that before anyone adds into it again.
  const std::uint64_t n = config_.parameters;
  const std::uint64_t sum = (allreduces_++ % kGroupSums) * group_stride_;
  group_area_.apply(VectorOp::accumulate, DType::f32, sum, n, 1.0, bytes_of(std::span<const float>(grads)));
  group_barrier("allreduce-written");
  group_area_.read(sum, bytes_of(grads));
  const float scale = 1.0f / static_cast<float>(config_.group_size);
  for (auto& g : grads) g *= scale;
  group_barrier("allreduce-read");
  const std::uint64_t share = (n + config_.group_size - 1) / config_.group_size;
  const std::uint64_t first = std::min<std::uint64_t>(n, config_.group_rank * share);
  const std::uint64_t count = std::min<std::uint64_t>(n - first, share);
  if (count > 0)  // a copy on the servers: nothing crosses the transport
    group_area_.apply_from(VectorOp::copy, DType::f32, sum + first * sizeof(float), count, 1.0, group_area_,
                           (kGroupSums + 1) * group_stride_ + first * sizeof(float));
}

void EngineCore::after_step(std::span<float> params) {
  if (params.size() != config_.parameters) throw Error(Errc::invalid_argument, "after_step: wrong parameter count");
  if (gpu_) gpu_->check_device_span(params, "after_step");
  if (++steps_ % config_.tau != 0) return;
  if (gpu_) {
    if (root()) {
      gpu_->to_staging(params, "after_step");
      exchange(gpu_->staging());
      gpu_->from_staging(params, "after_step");
    }
    gpu_->broadcast_from_root(params, "after_step");
    return;
  }
  if (root()) exchange(params);
  broadcast_in_group(params);
}

void EngineCore::exchange(std::span<float> params) {
  const std::uint64_t n = config_.parameters;
  switch (config_.mode) {
    case UpdateMode::seasgd:
      seasgd_exchange(params);
      break;
    case UpdateMode::downpour: {
      push_.resize(n);
      for (std::uint64_t i = 0; i < n; ++i) push_[i] = params[i] - last_pull_[i];
      delta_.write(0, bytes_of(std::span<const float>(push_)));
      global_.apply_from(VectorOp::accumulate, DType::f32, 0, n, 1.0, delta_, 0);
      global_.read(0, bytes_of(params));
      last_pull_.assign(params.begin(), params.end());
      break;
    }
    case UpdateMode::synchronous:
      synchronous_exchange(params);
      break;
  }
  ++exchanges_;
}

void EngineCore::broadcast_in_group(std::span<float> params) {
  if (config_.group_size == 1) return;
  const std::uint64_t slot = kGroupSums * group_stride_;
  if (root()) group_area_.write(slot, bytes_of(std::span<const float>(params)));
  group_barrier("broadcast-written");
  if (!root()) group_area_.read(slot, bytes_of(params));
  group_barrier("broadcast-read");
}

// The global weights of a checkpoint (save_checkpoint) as the starting point.
void EngineCore::resume_into(std::span<float> host) {
  const CheckpointInfo info = read_checkpoint(config_.resume_from);  // verified whole first
  if (info.size != bytes_)
    throw Error(Errc::invalid_argument,
                "resume from '" + config_.resume_from + "': the checkpoint holds " + std::to_string(info.size) +
                    " bytes (buffer '" + info.name + "'), the engine's " + std::to_string(config_.parameters) +
                    " parameters take " + std::to_string(bytes_));
  read_checkpoint(config_.resume_from, std::as_writable_bytes(host));
}

CheckpointInfo EngineCore::save_checkpoint(const std::string& path) {
  finish_pending();
  return client_.save(config_.name + "/global", path);
}

void EngineCore::global_weights(std::span<float> out) {
  if (out.size() != config_.parameters) throw Error(Errc::invalid_argument, "global_weights: wrong parameter count");
  // Into device memory through the staging buffer, or straight into host
  // memory (to save or evaluate the model on the CPU).
  const bool to_device = gpu_ && !gpu_->is_host_span(out);
  if (to_device) gpu_->check_device_span(out, "global_weights");
  finish_pending();
  if (to_device) {
    global_.read(0, bytes_of(gpu_->staging()));
    gpu_->from_staging(out, "global_weights");
    return;
  }
  global_.read(0, bytes_of(out));
}

}  // namespace detail

UpdateEngine::UpdateEngine(Client& client, EngineConfig config)
    : core_(std::make_unique<detail::EngineCore>(client, std::move(config))) {}
UpdateEngine::~UpdateEngine() = default;
void UpdateEngine::initialize(std::span<float> params) { core_->initialize(params); }
void UpdateEngine::allreduce(std::span<float> grads) { core_->allreduce(grads); }
void UpdateEngine::after_step(std::span<float> params) { core_->after_step(params); }
void UpdateEngine::global_weights(std::span<float> out) { core_->global_weights(out); }
CheckpointInfo UpdateEngine::save_checkpoint(const std::string& path) { return core_->save_checkpoint(path); }

}  // namespace smb
