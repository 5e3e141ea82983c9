#include "runner.hpp"

#include "bench_buffer.hpp"
#include "fetch_add.hpp"
#include "progress.hpp"
#include "sync_ops.hpp"
#include "transfer.hpp"
#include "vector_op.hpp"

#include "../common/tool_setup.hpp"

namespace smb::bench {
namespace {

void run_fetch_add_phase(BenchBuffer& bench, const Options& o, Report& report) {
  Buffer& buffer = bench.buffer();
  const std::uint64_t words = o.size / 8;
  const std::uint64_t touched = touched_words(words, o.iters);
  std::uint64_t before = 0;
  if (o.verify) {
    if (bench.created()) zero_words(buffer, touched);
    before = sum_words(buffer, touched);  // others' earlier adds on a reused buffer
  }
  report.phase = run_fetch_add(buffer, words, o.iters, o.threads);
  if (!o.verify) return;
  const std::uint64_t expected = std::uint64_t{o.threads} * o.iters;
  const std::uint64_t got = sum_words(buffer, touched) - before;
  report.verified = got == expected;
  if (got != expected) report.sum = SumMismatch{expected, got};
}

void run_compare_swap_phase(BenchBuffer& bench, const Options& o, Report& report) {
  Buffer& buffer = bench.buffer();
  const std::uint64_t words = o.size / 8;
  const std::uint64_t touched = touched_words(words, o.iters);
  if (o.verify && bench.created()) zero_words(buffer, touched);
  const std::uint64_t before = o.verify ? sum_words(buffer, touched) : 0;
  std::uint64_t swaps = 0;
  report.phase = run_compare_swap(buffer, words, o.iters, o.threads, swaps);
  if (!o.verify) return;
  const std::uint64_t got = sum_words(buffer, touched) - before;
  report.verified = got == swaps;
  if (got != swaps) report.sum = SumMismatch{swaps, got};
}

// The timeout of one wait: the client's (SMB default 15 s) is too short for
// a slow partner process to start; a minute.
constexpr std::chrono::milliseconds kSyncTimeout{60'000};

void run_vector_phase(BenchBuffer& bench, const Options& o, Report& report) {
  Buffer& buffer = bench.buffer();
  if (o.verify && bench.created()) zero_elements(buffer, o);
  {
    ProgressBar bar(std::string(op_name(o.op)), o.size / element_size(o.dtype) * element_size(o.dtype) * o.iters,
                    ProgressBar::wanted(o.json));
    report.phase = run_vector_op(buffer, o);
  }
  if (!o.verify) return;
  if (!bench.created()) return;  // others may have updated an existing buffer: nothing to compare with
  report.value = check_elements(buffer, o, expected_value(o));
  report.verified = !report.value;
}

void run_transfer_phase(BenchBuffer& bench, const Options& o, Report& report) {
  TransferPlan plan;
  plan.direction = o.op == Op::write ? Direction::write : Direction::read;
  plan.size = o.size;
  plan.block = o.block;
  plan.iters = o.iters;
  plan.depth = o.depth;
  plan.threads = o.threads;
  plan.pattern = o.verify;
  if (o.register_memory) plan.registrar = &bench.client();
  {
    ProgressBar bar(o.op == Op::write ? "write" : "read", o.size * o.iters, ProgressBar::wanted(o.json));
    report.phase = run_transfer(bench.buffer(), plan);
  }
  if (!o.verify) return;
  if (plan.direction == Direction::write) {  // read it all back, untimed
    plan.direction = Direction::read;
    plan.iters = 1;
    report.mismatch = run_transfer(bench.buffer(), plan).mismatch;
  } else {
    report.mismatch = report.phase.mismatch;
  }
  report.verified = !report.mismatch;
}

}  // namespace

namespace {
// The waking side is a second client, as another worker would be.
void run_notify_phase(BenchBuffer& bench, const Options& options, Report& report) {
  Client peer(tools::client_options(options.servers));
  auto buffer = peer.open(bench.name());
  report.phase = run_notify(bench.buffer(), buffer, options.iters, kSyncTimeout);
}
}  // namespace

Report run_benchmark(Client& client, const Options& options) {
  BenchBuffer bench(client, options);
  Report report;
  report.options = options;
  report.name = bench.name();
  report.created = bench.created();
  report.temporary = bench.temporary();
  const Layout& layout = bench.buffer().layout();
  report.stripe_unit = layout.stripe_unit;
  report.replicas = layout.replicas;
  report.servers = layout.servers.size();
  if (options.op == Op::fetch_add)
    run_fetch_add_phase(bench, options, report);
  else if (options.op == Op::compare_swap)
    run_compare_swap_phase(bench, options, report);
  else if (options.op == Op::notify)
    run_notify_phase(bench, options, report);
  else if (options.op == Op::barrier)
    report.phase = run_barrier(client, bench.name() + "/barrier", options.parties, options.iters, options.threads,
                               kSyncTimeout);
  else if (is_vector_op(options.op))
    run_vector_phase(bench, options, report);
  else
    run_transfer_phase(bench, options, report);
  report.paths = client.describe_paths();
  return report;
}

}  // namespace smb::bench
