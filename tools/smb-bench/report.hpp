#pragma once
// smb-bench's output: a human summary, or one JSON object with --json.
#include "options.hpp"
#include "results.hpp"

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace smb::bench {

struct Report {
  Options options;
  std::string name;
  bool created = false;                // the buffer was created by this run
  bool temporary = false;
  std::uint64_t stripe_unit = 0;
  std::uint32_t replicas = 1;
  std::size_t servers = 0;             // servers the buffer is striped over
  std::vector<std::string> paths;      // Client::describe_paths()
  PhaseResult phase;                   // the timed phase
  std::optional<bool> verified;        // unset: --verify not given
  std::optional<Mismatch> mismatch;    // write/read verification
  std::optional<SumMismatch> sum;      // fetch-add verification
  std::optional<ValueMismatch> value;  // accumulate/axpy verification
};

// Sorts the report's latency samples.
void print_json(std::ostream& out, Report& report);
void print_human(std::ostream& out, Report& report);

}  // namespace smb::bench
