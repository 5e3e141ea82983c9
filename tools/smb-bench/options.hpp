#pragma once
// smb-bench's command line.
#include <smb/vector_ops.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace smb::bench {

enum class Op { write, read, fetch_add, compare_swap, notify, barrier, accumulate, axpy, min, max, product };
const char* op_name(Op op) noexcept;
// The ops the servers compute (run by vector_op.cpp), rather than transfers.
inline bool is_vector_op(Op op) noexcept { return op >= Op::accumulate; }

struct Options {
  std::optional<std::string> servers;  // --servers; unset: SMB_SERVERS
  std::string name;                    // empty: a temporary buffer
  Op op = Op::write;
  std::uint64_t size = 0;              // bytes of the buffer covered
  std::uint64_t block = 0;             // bytes per read/write op
  std::uint64_t iters = 1;             // passes (write/read) or ops per thread (fetch-add)
  std::uint32_t depth = 1;             // async ops in flight per thread
  std::uint32_t threads = 1;
  std::uint32_t parties = 0;           // barrier: processes x threads meeting (0: --threads)
  std::uint64_t stripe_unit = 0;       // for a created buffer; 0: libsmb's default
  std::uint32_t replicas = 1;          // copies of each stripe of a created buffer
  DType dtype = DType::f32;            // vector ops
  double value = 1.0;                  // every element of x
  double alpha = 1.0;                  // axpy's a
  bool verify = false;
  bool keep = false;
  bool register_memory = false;  // register op memory with the client (zero-copy on native verbs)
  bool json = false;
  bool verbose = false;
};

// Parses argv. Returns the options, or nothing after printing help or a
// usage error, with the status to exit with in exit_code.
std::optional<Options> parse_options(int argc, char** argv, int& exit_code);

}  // namespace smb::bench
