#pragma once
// An engine group's NCCL communicator and its two collectives. The group
// root makes the ncclUniqueId and hands it to the members through the fabric
// itself: it writes the id into a small buffer, the group meets at a
// barrier, then the members read it. The smbd servers are the rendezvous;
// no MPI or TCP store is needed.
#include "nccl_comm.hpp"

#include <smb/client.hpp>

#include <chrono>
#include <span>
#include <string>

namespace smb::gpu {

struct NcclGroupConfig {
  std::string id_buffer;   // where the root publishes the id ("<engine>/nccl-id/<group>")
  std::string id_barrier;  // the group's barrier after the root wrote it
  int size = 1;
  int rank = 0;            // 0: the group root
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
  std::string where;       // error context: engine, group, rank, device
};

class NcclGroup {
 public:
  // Collective over the group, on the calling thread's current device.
  NcclGroup(Client& client, const NcclGroupConfig& config);

  // In place on `stream`, each waiting until done (the engine is synchronous).
  void allreduce_average(std::span<float> data, cudaStream_t stream, const char* op);
  void broadcast_from_root(std::span<float> data, cudaStream_t stream, const char* op);

 private:
  NcclComm comm_;
};

}  // namespace smb::gpu
