// A shard of a large allreduce reduced on a rank in the mapping
// (plugins/collective/mapped_shard.hpp), over real smbd: where the client
// maps the buffer (UCX shared memory) the shard's bytes of the result are
// exactly the inputs combined in order, across stripe boundaries, and
// nothing else changes; where it does not, nothing is written at all.
#include "fabric.hpp"

#include <mapped_shard.hpp>
#include <smb/client.hpp>
#include <smb/error.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace {

using namespace smb::test;

constexpr std::uint64_t kStripe = 64;             // bytes: 16 floats
constexpr std::uint64_t kRegion = 3 * kStripe;    // one tensor of 48 floats, over 3 stripes
constexpr std::uint64_t kInputs = 3;              // ranks
constexpr std::uint64_t kLo = 40, kHi = 152;      // the shard: crosses two stripe boundaries

class MappedShardTest : public FabricTest {};

std::vector<float> input(std::uint64_t rank) {
  std::vector<float> v(kRegion / 4);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(rank * 100 + i) * (rank % 2 ? -0.5f : 1.0f);
  return v;
}

TEST_P(MappedShardTest, TheShardIsTheInputsCombinedWhereMappedAndUntouchedElsewhere) {
  auto client = make_client();
  smb::BufferOptions options;
  options.stripe_unit = kStripe;
  auto buffer = client.create("red", kRegion * (1 + kInputs), options);
  const std::vector<float> before(kRegion / 4, -1.0f);
  buffer.write(0, std::as_bytes(std::span(before)));  // the result region
  std::vector<std::uint64_t> inputs;
  for (std::uint64_t k = 0; k < kInputs; ++k) {
    inputs.push_back(kRegion * (1 + k));
    const auto values = input(k);
    buffer.write(inputs.back(), std::as_bytes(std::span(values)));
  }

  const bool mapped = smb::python::maps_regions(buffer, inputs, 0, kRegion, kStripe);
  EXPECT_EQ(mapped, GetParam().label == "ucx_shm") << "the client maps the buffer over shared memory only";
  const bool reduced = smb::python::reduce_mapped_shard(buffer, smb::DType::f32, "sum", 0, inputs, kLo, kHi, kStripe);
  EXPECT_EQ(reduced, mapped);

  std::vector<float> result(kRegion / 4);
  buffer.read(0, std::as_writable_bytes(std::span(result)));
  for (std::size_t i = 0; i < result.size(); ++i) {
    float expected = -1.0f;
    if (reduced && i * 4 >= kLo && i * 4 < kHi) {
      expected = input(0)[i];
      for (std::uint64_t k = 1; k < kInputs; ++k) expected += input(k)[i];
    }
    EXPECT_EQ(result[i], expected) << "element " << i << (reduced ? "" : " (nothing may be written)");
  }
  EXPECT_THROW(smb::python::reduce_mapped_shard(buffer, smb::DType::f32, "mean", 0, inputs, kLo, kHi, kStripe),
               smb::Error);
  EXPECT_THROW(smb::python::reduce_mapped_shard(buffer, smb::DType::f16, "sum", 0, inputs, kLo, kHi, kStripe),
               smb::Error);
}

INSTANTIATE_TEST_SUITE_P(Fabrics, MappedShardTest, testing::ValuesIn(all_fabrics()), fabric_name);

}  // namespace
