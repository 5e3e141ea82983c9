#pragma once
// The server-side vector-op benchmark: accumulate, axpy, min, max or
// product a constant vector (every element V) into the buffer, --iters
// times, in --block sized requests.
#include "options.hpp"
#include "results.hpp"

#include <smb/client.hpp>

#include <optional>

namespace smb::bench {

PhaseResult run_vector_op(Buffer& buffer, const Options& o);
// Sets every element of the covered region to zero (a freshly created buffer).
void zero_elements(Buffer& buffer, const Options& o);
// Checks that every element equals `expected`; the first one that does not.
std::optional<ValueMismatch> check_elements(Buffer& buffer, const Options& o, double expected);
// What --iters runs leave in each element of a zeroed buffer, as stored.
double expected_value(const Options& o);

}  // namespace smb::bench
