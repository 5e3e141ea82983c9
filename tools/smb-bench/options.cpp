#include "options.hpp"

#include "../common/vector_elements.hpp"

#include <smb/client.hpp>
#include <smb/error.hpp>

#include <CLI/CLI.hpp>

#include <cmath>

namespace smb::bench {
namespace {

// write and read without --block: large enough that a block costs far more
// than its op's overhead (the README's examples use it too).
constexpr std::uint64_t kDefaultBlock = 1 << 20;

constexpr std::uint64_t default_fetch_add_iters = 10000;
constexpr std::uint64_t default_sync_iters = 1000;  // notify round trips, barriers

// Accepts what smb::parse_size accepts ("64", "4K", "128M", "2G").
const CLI::Validator size_validator(
    [](std::string& text) -> std::string {
      try {
        parse_size(text);
        return {};
      } catch (const Error& e) {
        return e.what();
      }
    },
    "SIZE");

}  // namespace

const char* op_name(Op op) noexcept {
  switch (op) {
    case Op::write: return "write";
    case Op::read: return "read";
    case Op::fetch_add: return "fetch-add";
    case Op::compare_swap: return "compare-swap";
    case Op::notify: return "notify";
    case Op::barrier: return "barrier";
    case Op::accumulate: return "accumulate";
    case Op::axpy: return "axpy";
    case Op::min: return "min";
    case Op::max: return "max";
    case Op::product: return "product";
  }
  return "?";
}

std::optional<Options> parse_options(int argc, char** argv, int& exit_code) {
  Options o;
  std::string servers, size, block, stripe_unit;

  CLI::App app{
      "Measure bandwidth and latency of a Soft Memory Box buffer.\n"
      "write/read: each iteration is one pass over --size bytes in --block sized ops, the\n"
      "blocks split among --threads threads, each with up to --depth ops in flight (latency\n"
      "is from issue to observed completion, completions are awaited in issue order).\n"
      "fetch-add: each thread adds 1 to the 8-byte words of the buffer in turn, --iters times.\n"
      "compare-swap: the same increments by compare-and-swap (a lost race is retried; each try counts).\n"
      "notify: two clients (as two workers, one thread each) bump the buffer's version in turn (a\n"
      "server-side accumulate of one f32) and wait for each other's bump; latency is half a round\n"
      "trip, notify to wake. Use a small --size.\n"
      "barrier: --threads threads (of --parties in all, across processes) meet --iters times.\n"
      "accumulate/axpy/min/max/product: the servers add V (axpy: A*V) to every --dtype element\n"
      "(min/max/product: y = min(y,V), max(y,V), y*V), --iters times, in --block sized\n"
      "requests (default: the whole --size); --verify zeroes a created buffer first and checks\n"
      "the result, so it assumes nobody else updates the buffer meanwhile.\n"
      "--verify: write stores a pattern that depends only on the byte offset and reads it all\n"
      "back; read checks every byte against it; fetch-add checks the sum of the words.",
      "smb-bench"};
  auto* servers_opt = app.add_option("--servers,-s", servers, "memory servers as host:port,... (default: $SMB_SERVERS)");
  app.add_option("--name,-n", o.name, "buffer to open, or create when missing (default: a temporary one)");
  std::string op;
  app.add_option("--op", op,
                 "write, read, fetch-add, compare-swap, notify, barrier, accumulate, axpy, min, max or product")
      ->required()
      ->check(CLI::IsMember({"write", "read", "fetch-add", "compare-swap", "notify", "barrier", "accumulate", "axpy",
                             "min", "max", "product"}));
  std::string dtype = "f32";
  app.add_option("--dtype", dtype, "element type of the vector ops (f32, f64, f16, bf16, u8, i8, i16, i32, i64)")
      ->check(CLI::IsMember(tools::dtype_names()))
      ->capture_default_str();
  app.add_option("--value", o.value, "vector ops: every element of x")->capture_default_str();
  app.add_option("--alpha", o.alpha, "axpy: y = alpha*x + y")->capture_default_str();
  app.add_option("--size", size, "bytes of the buffer to cover (K/M/G/T suffixes)")
      ->required()
      ->check(size_validator);
  app.add_option("--block", block, "bytes per op for write and read (K/M/G suffixes; default 1M, or --size if smaller)")
      ->check(size_validator);
  auto* iters_opt = app.add_option("--iters", o.iters, "passes over --size (write, read; default 1), or "
                                   "fetch-adds per thread (default 10000)")
                        ->check(CLI::PositiveNumber);
  app.add_option("--depth", o.depth, "async ops in flight per thread (default 1: synchronous ops)")
      ->check(CLI::Range(1u, 65536u));
  app.add_option("--threads", o.threads, "threads sharing one client (default 1)")->check(CLI::Range(1u, 4096u));
  app.add_option("--parties", o.parties, "barrier: parties in all, other processes' threads included "
                 "(default --threads)")
      ->check(CLI::Range(1u, 1000000u));
  app.add_option("--stripe-unit", stripe_unit, "stripe unit of a created buffer (default: libsmb's)")
      ->check(size_validator);
  app.add_option("--replicas", o.replicas,
                 "copies of each stripe of a created buffer, each on its own server (default 1)")
      ->check(CLI::Range(1u, smb::kMaxReplicas));
  app.add_flag("--verify", o.verify, "write or check the verification pattern (exit 1 on a mismatch)");
  app.add_flag("--keep", o.keep, "keep the temporary buffer (its name is printed)");
  app.add_flag("--register", o.register_memory,
               "write/read: register each thread's op memory first (native verbs moves it zero-copy)");
  app.add_flag("--json", o.json, "print one JSON object on stdout");
  app.add_flag("--verbose,-v", o.verbose, "log libsmb's connection details to stderr");

  try {
    app.parse(argc, argv);
    o.op = op == "read"         ? Op::read
           : op == "fetch-add"  ? Op::fetch_add
           : op == "compare-swap" ? Op::compare_swap
           : op == "notify"     ? Op::notify
           : op == "barrier"    ? Op::barrier
           : op == "accumulate" ? Op::accumulate
           : op == "axpy"       ? Op::axpy
           : op == "min"        ? Op::min
           : op == "max"        ? Op::max
           : op == "product"    ? Op::product
                                : Op::write;
    o.dtype = *parse_dtype(dtype);
    o.size = parse_size(size);
    if (!block.empty()) o.block = parse_size(block);
    if (!stripe_unit.empty()) o.stripe_unit = parse_size(stripe_unit);
    if (o.size == 0) throw CLI::ValidationError("--size", "must be greater than zero");
    if (o.op == Op::fetch_add || o.op == Op::compare_swap) {
      if (o.size < 8) throw CLI::ValidationError("--size", std::string(op) + " needs at least one 8-byte word");
      if (iters_opt->count() == 0) o.iters = default_fetch_add_iters;
    } else if (o.op == Op::notify || o.op == Op::barrier) {
      if (o.op == Op::notify && o.size < 4) throw CLI::ValidationError("--size", "notify needs one f32");
      if (iters_opt->count() == 0) o.iters = default_sync_iters;
      if (o.parties == 0) o.parties = o.threads;
      if (o.parties < o.threads) throw CLI::ValidationError("--parties", "must be at least --threads");
    } else if (is_vector_op(o.op)) {
      if (o.size < element_size(o.dtype)) throw CLI::ValidationError("--size", "smaller than one element");
      // Integer elements hold V exactly, and the servers take only an integral alpha for them.
      if (is_integer(o.dtype) && o.value != std::trunc(o.value))
        throw CLI::ValidationError("--value", "must be an integer for --dtype " + dtype);
      if (is_integer(o.dtype) && o.op == Op::axpy && o.alpha != std::trunc(o.alpha))
        throw CLI::ValidationError("--alpha", "must be an integer for --dtype " + dtype);
      if (o.block == 0) o.block = o.size;
    } else if (o.block == 0) {
      o.block = std::min<std::uint64_t>(o.size, kDefaultBlock);
    }
  } catch (const CLI::ParseError& e) {
    exit_code = app.exit(e) == 0 ? 0 : 2;  // --help: 0; any usage error: 2
    return std::nullopt;
  }
  if (servers_opt->count() > 0) o.servers = servers;
  return o;
}

}  // namespace smb::bench
