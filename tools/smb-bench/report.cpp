#include "report.hpp"

#include <util/parse.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>

namespace smb::bench {
namespace {

struct Rates {
  double bandwidth = 0;  // bytes/s
  double ops = 0;        // ops/s
  double p50_us = 0;
  double p99_us = 0;
};

Rates rates(Report& r) {
  Rates out;
  if (r.phase.seconds > 0) {
    out.bandwidth = static_cast<double>(r.phase.bytes) / r.phase.seconds;
    out.ops = static_cast<double>(r.phase.ops) / r.phase.seconds;
  }
  out.p50_us = percentile_us(r.phase.latencies_ns, 0.50);
  out.p99_us = percentile_us(r.phase.latencies_ns, 0.99);
  return out;
}

std::uint64_t block_bytes(const Options& o) {
  switch (o.op) {
    case Op::fetch_add:
    case Op::compare_swap: return 8;
    case Op::notify: return 4;
    case Op::barrier: return 0;
    default: return o.block;
  }
}

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::string hex_byte(unsigned value) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02x", value);
  return text;
}

}  // namespace

void print_json(std::ostream& out, Report& r) {
  const Rates rate = rates(r);
  const Options& o = r.options;
  nlohmann::json doc = {
      {"op", op_name(o.op)},
      {"bytes", r.phase.bytes},
      {"seconds", r.phase.seconds},
      {"bandwidth_bytes_per_s", rate.bandwidth},
      {"ops", r.phase.ops},
      {"ops_per_s", rate.ops},
      {"p50_us", rate.p50_us},
      {"p99_us", rate.p99_us},
      {"verified", r.verified ? nlohmann::json(*r.verified) : nlohmann::json(nullptr)},
      {"size", o.size},
      {"block", block_bytes(o)},
      {"iters", o.iters},
      {"depth", o.depth},
      {"threads", o.threads},
      {"parties", o.op == Op::barrier ? o.parties : o.threads},
      {"name", r.name},
      {"created", r.created},
      {"temporary", r.temporary},
      {"kept", !r.temporary || o.keep},
      {"stripe_unit", r.stripe_unit},
      {"replicas", r.replicas},
      {"servers", r.servers},
      {"paths", r.paths},
  };
  if (r.mismatch)
    doc["mismatch"] = {{"offset", r.mismatch->offset}, {"expected", r.mismatch->expected}, {"got", r.mismatch->got}};
  if (r.sum) doc["sum_mismatch"] = {{"expected", r.sum->expected}, {"got", r.sum->got}};
  if (r.value)
    doc["value_mismatch"] = {{"element", r.value->element}, {"expected", r.value->expected}, {"got", r.value->got}};
  if (is_vector_op(o.op)) {
    doc["dtype"] = dtype_name(o.dtype);
    doc["value"] = o.value;
    doc["alpha"] = o.alpha;
  }
  out << doc.dump() << '\n';
}

void print_human(std::ostream& out, Report& r) {
  const Rates rate = rates(r);
  const Options& o = r.options;
  out << op_name(o.op) << " on '" << r.name << "'" << (r.temporary ? " (temporary)" : "")
      << (r.created ? ", created" : "") << ": " << util::format_bytes(o.size) << " over " << r.servers
      << " server(s), stripe unit " << util::format_bytes(r.stripe_unit)
      << (r.replicas > 1 ? ", " + std::to_string(r.replicas) + " copies" : std::string()) << '\n';
  if (o.op == Op::fetch_add || o.op == Op::compare_swap)
    out << "  " << o.iters << " " << op_name(o.op) << "(s) per thread, " << o.threads << " thread(s)\n";
  else if (o.op == Op::notify)
    out << "  " << o.iters << " notify/wait round trips between 2 threads (latency: half a round trip)\n";
  else if (o.op == Op::barrier)
    out << "  " << o.iters << " barrier(s) of " << o.parties << " part(ies), " << o.threads
        << " thread(s) here\n";
  else if (is_vector_op(o.op))
    out << "  " << o.iters << " pass(es) of " << dtype_name(o.dtype) << " " << op_name(o.op) << " (value " << o.value
        << (o.op == Op::axpy ? ", alpha " + fixed(o.alpha, 3) : std::string()) << ") in "
        << util::format_bytes(o.block) << " requests\n";
  else
    out << "  " << o.iters << " pass(es) in " << util::format_bytes(o.block) << " blocks, depth " << o.depth
        << ", " << o.threads << " thread(s)\n";
  out << "  moved      " << util::format_bytes(r.phase.bytes) << " in " << fixed(r.phase.seconds, 3) << " s: "
      << util::format_bytes(static_cast<std::uint64_t>(rate.bandwidth)) << "/s, " << fixed(rate.ops, 0)
      << " ops/s (" << r.phase.ops << " ops)\n"
      << "  latency    p50 " << fixed(rate.p50_us, 1) << " us, p99 " << fixed(rate.p99_us, 1) << " us\n";
  if (r.verified) {
    out << "  verify     " << (*r.verified ? "ok" : "FAILED");
    if (r.mismatch)
      out << ": first bad byte at offset " << r.mismatch->offset << ", expected " << hex_byte(r.mismatch->expected)
          << ", got " << hex_byte(r.mismatch->got);
    if (r.sum) out << ": the words' sum grew by " << r.sum->got << ", expected " << r.sum->expected;
    if (r.value)
      out << ": element " << r.value->element << " is " << r.value->got << ", expected " << r.value->expected;
    out << '\n';
  }
  for (const auto& path : r.paths) out << "  path       " << path << '\n';
  if (r.temporary && o.keep) out << "  kept buffer '" << r.name << "'\n";
}

}  // namespace smb::bench
