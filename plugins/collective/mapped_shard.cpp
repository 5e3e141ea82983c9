#include "mapped_shard.hpp"

#include "rank_reduction.hpp"

#include <smb/error.hpp>

#include <algorithm>
#include <cstring>
#include <span>

namespace smb::python {
namespace {

// Calls `each(at, length)` for the pieces of [lo, hi) that do not cross a
// stripe boundary (regions start on one); stops where it returns false.
template <typename Each>
bool for_each_stripe_piece(std::uint64_t lo, std::uint64_t hi, std::uint64_t stripe_unit, Each each) {
  if (stripe_unit == 0) throw Error(Errc::invalid_argument, "reduction on the ranks: a stripe unit of 0");
  for (std::uint64_t at = lo; at < hi;) {
    const std::uint64_t end = std::min(hi, (at / stripe_unit + 1) * stripe_unit);
    if (!each(at, end - at)) return false;
    at = end;
  }
  return true;
}

}  // namespace

bool maps_regions(Buffer& buffer, const std::vector<std::uint64_t>& offsets, std::uint64_t offset,
                  std::uint64_t length, std::uint64_t stripe_unit) {
  return for_each_stripe_piece(offset, offset + length, stripe_unit, [&](std::uint64_t at, std::uint64_t n) {
    return std::all_of(offsets.begin(), offsets.end(),
                       [&](std::uint64_t region) { return buffer.mapping(region + at, n) != nullptr; });
  });
}

bool reduce_mapped_shard(Buffer& buffer, DType type, const std::string& op, std::uint64_t result,
                         const std::vector<std::uint64_t>& inputs, std::uint64_t lo, std::uint64_t hi,
                         std::uint64_t stripe_unit) {
  const RankReduction how(type, op);
  if (inputs.empty() || hi < lo) throw Error(Errc::invalid_argument, "reduction on the ranks: no inputs or lo > hi");
  std::vector<std::uint64_t> all(inputs);
  all.push_back(result);
  if (!maps_regions(buffer, all, lo, hi - lo, stripe_unit)) return false;  // before writing anything
  std::vector<const std::byte*> from(inputs.size());
  return for_each_stripe_piece(lo, hi, stripe_unit, [&](std::uint64_t at, std::uint64_t n) {
    for (std::size_t k = 0; k < inputs.size(); ++k) from[k] = buffer.mapping(inputs[k] + at, n);
    const std::span<std::byte> out(buffer.mapping(result + at, n), n);
    std::memcpy(out.data(), from[0], n);
    for (std::size_t k = 1; k < from.size(); ++k) how.combine_into(out, from[k]);
    return true;
  });
}

}  // namespace smb::python
