#include "nccl_group.hpp"

#include "cuda_error.hpp"

namespace smb::gpu {

namespace {

ncclUniqueId share_id(Client& client, const NcclGroupConfig& config) {
  ncclUniqueId id{};
  if (config.rank == 0) {
    check_nccl(ncclGetUniqueId(&id), config.where, "connect", "ncclGetUniqueId");
    // Written even for a group of one: the same path for every group size.
    Buffer buffer = client.open_or_create(config.id_buffer, sizeof id);
    buffer.write(0, std::as_bytes(std::span(&id, 1)));
  }
  if (config.size > 1) {
    client.barrier(config.id_barrier, static_cast<std::uint32_t>(config.size), config.timeout);
    if (config.rank != 0) client.open(config.id_buffer).read(0, std::as_writable_bytes(std::span(&id, 1)));
  }
  return id;
}

}  // namespace

NcclGroup::NcclGroup(Client& client, const NcclGroupConfig& config)
    : comm_(share_id(client, config), config.size, config.rank, config.timeout, config.where) {}

void NcclGroup::allreduce_average(std::span<float> data, cudaStream_t stream, const char* op) {
  comm_.finish(ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat, ncclAvg, comm_.get(op), stream),
               stream, op, "ncclAllReduce");
}

void NcclGroup::broadcast_from_root(std::span<float> data, cudaStream_t stream, const char* op) {
  comm_.finish(ncclBroadcast(data.data(), data.data(), data.size(), ncclFloat, 0, comm_.get(op), stream), stream,
               op, "ncclBroadcast");
}

}  // namespace smb::gpu
