#pragma once
// A large allreduce reduced on the ranks (smb.collective.data,
// _reduce_by_ranks), where the ranks map the reduction buffer (one host,
// UCX shared memory: Buffer::mapping): rank k combines shard k of every
// rank's input in place, straight from the mapping into the result's
// mapped bytes. Through the transport the same shard took W reads into one
// array, NumPy's passes over it and a write back; here it is one pass that
// reads each input once and writes the result once.
#include <smb/client.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace smb::python {

// Where the buffer maps [offset, offset + length) of every region at
// `offsets`: whether reduce_mapped_shard can run. Regions are striped
// (`stripe_unit`, each region starting on a stripe boundary), so a range
// maps stripe by stripe.
bool maps_regions(Buffer& buffer, const std::vector<std::uint64_t>& offsets, std::uint64_t offset,
                  std::uint64_t length, std::uint64_t stripe_unit);

// result[lo, hi) = inputs[0][lo, hi) (op) inputs[1][lo, hi) ..., in that
// order (the same bits whichever rank computes it), each region given by
// its offset in the buffer. False, with nothing written, where some range
// is not mapped (the caller then reads through the transport).
bool reduce_mapped_shard(Buffer& buffer, DType type, const std::string& op, std::uint64_t result,
                         const std::vector<std::uint64_t>& inputs, std::uint64_t lo, std::uint64_t hi,
                         std::uint64_t stripe_unit);

}  // namespace smb::python
