#pragma once
// A reduction that a rank computes itself, element by element, as NumPy's
// ufuncs do (integers wrap, a NaN wins min and max): the arrival board's
// small tensors and the shards of a large one reduced on the ranks
// (mapped_shard.hpp). Every rank that combines the same inputs in the same
// order gets the same bits.
#include <smb/client.hpp>

#include <cstddef>
#include <span>
#include <string>

namespace smb::python {

// The dtypes a rank reduces in C++ (not f16 or bf16).
bool reducible_on_ranks(DType type);

// Whether scale_in_place() scales `type`: float32 and float64, which
// Horovod scales in their own type (a float32 times the factor rounded to
// float32, as torch's mul_ does); the others scale through float64 and back.
bool scales_in_place(DType type);
// data[i] *= factor over data's elements of `type` (scales_in_place()).
void scale_in_place(DType type, std::span<std::byte> data, double factor);

enum class RankOp { add, product, min, max };

class RankReduction {
 public:
  // op: sum, average (a sum: the caller scales), product, min or max.
  // Throws Errc::invalid_argument for another op or a dtype not reducible.
  RankReduction(DType type, const std::string& op);
  // out[i] = out[i] (op) x[i] over out's elements; x holds as many bytes.
  void combine_into(std::span<std::byte> out, const std::byte* x) const;

 private:
  DType type_;
  RankOp op_;
};

}  // namespace smb::python
