#pragma once
// Runs one smb-bench invocation: buffer set-up, the timed phase, verification.
#include "options.hpp"
#include "report.hpp"

#include <smb/client.hpp>

namespace smb::bench {

// Throws smb::Error when the fabric fails; a failed verification is reported
// in the result (verified == false), not thrown.
Report run_benchmark(Client& client, const Options& options);

}  // namespace smb::bench
