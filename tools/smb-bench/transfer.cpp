#include "transfer.hpp"

#include "progress.hpp"

#include "parallel.hpp"
#include "pattern.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <span>
#include <vector>

namespace smb::bench {
namespace {

using Clock = std::chrono::steady_clock;

// One op's local memory and, while it is in flight, its request.
struct Slot {
  std::vector<std::byte> data;
  Request request;
  std::uint64_t offset = 0;
  std::size_t length = 0;
  Clock::time_point issued;
  std::span<std::byte> span() { return {data.data(), length}; }
};

// Waits for whatever is still in flight, so that no op outlives its slot's
// memory when a thread leaves early on an error.
struct DrainOnExit {
  std::vector<Slot>& slots;
  ~DrainOnExit() {
    for (auto& s : slots) {
      if (!s.request.valid()) continue;
      try {
        s.request.wait();
      } catch (...) {  // already failing; the first error is the one reported
      }
    }
  }
};

// Blocks [first, last) of the pass for thread `index` of `count`.
struct BlockRange {
  std::uint64_t first = 0;
  std::uint64_t last = 0;
};
BlockRange slice(std::uint64_t blocks, std::uint32_t index, std::uint32_t count) {
  auto start = [&](std::uint64_t i) { return blocks / count * i + std::min<std::uint64_t>(i, blocks % count); };
  return {start(index), start(index + 1u)};
}

class Worker {
 public:
  Worker(Buffer& buffer, const TransferPlan& plan, BlockRange range)
      : buffer_(buffer), plan_(plan), range_(range) {
    const std::uint64_t blocks = range.last - range.first;
    slots_.resize(static_cast<std::size_t>(std::clamp<std::uint64_t>(blocks, 1, plan.depth)));
    for (auto& s : slots_) {
      s.data.resize(static_cast<std::size_t>(plan.block));
      // Without --verify, write some non-zero bytes once.
      if (plan.direction == Direction::write && !plan.pattern) fill_pattern(0, s.data);
      if (plan.registrar != nullptr) registrations_.push_back(plan.registrar->register_memory(s.data));
    }
    result_.latencies_ns.reserve(static_cast<std::size_t>(blocks * plan.iters));
  }

  PhaseResult run(ThreadContext& context) {
    DrainOnExit drain{slots_};
    context.start();
    std::size_t next = 0;
    for (std::uint64_t iter = 0; iter < plan_.iters; ++iter) {
      for (std::uint64_t b = range_.first; b < range_.last && !context.stop; ++b) {
        Slot& slot = slots_[next];
        next = (next + 1) % slots_.size();
        if (slot.request.valid()) complete(slot);
        issue(slot, b * plan_.block);
      }
    }
    for (std::size_t i = 0; i < slots_.size(); ++i) {  // oldest first
      Slot& slot = slots_[(next + i) % slots_.size()];
      if (slot.request.valid()) complete(slot);
    }
    return std::move(result_);
  }

 private:
  void issue(Slot& slot, std::uint64_t offset) {
    slot.offset = offset;
    slot.length = static_cast<std::size_t>(std::min(plan_.block, plan_.size - offset));
    const bool writing = plan_.direction == Direction::write;
    if (writing && plan_.pattern) fill_pattern(offset, slot.span());
    slot.issued = Clock::now();
    if (plan_.depth == 1) {
      if (writing)
        buffer_.write(offset, slot.span());
      else
        buffer_.read(offset, slot.span());
      finish(slot);
    } else {
      slot.request = writing ? buffer_.write_async(offset, slot.span()) : buffer_.read_async(offset, slot.span());
    }
  }

  void complete(Slot& slot) {
    Request request = std::move(slot.request);
    slot.request = Request{};
    request.wait();
    finish(slot);
  }

  void finish(Slot& slot) {
    const auto elapsed = Clock::now() - slot.issued;
    result_.latencies_ns.push_back(
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count()));
    ++result_.ops;
    result_.bytes += slot.length;
    progress_add(slot.length);
    if (plan_.direction == Direction::read && plan_.pattern) check(slot);
  }

  void check(const Slot& slot) {
    const std::span<const std::byte> data{slot.data.data(), slot.length};
    const auto bad = find_mismatch(slot.offset, data);
    if (!bad || (result_.mismatch && result_.mismatch->offset <= *bad)) return;
    result_.mismatch = Mismatch{*bad, std::to_integer<unsigned>(pattern_byte(*bad)),
                                std::to_integer<unsigned>(data[static_cast<std::size_t>(*bad - slot.offset)])};
  }

  Buffer& buffer_;
  const TransferPlan& plan_;
  BlockRange range_;
  std::vector<Slot> slots_;
  std::vector<MemoryRegistration> registrations_;  // of the slots' memory, with --register
  PhaseResult result_;
};

}  // namespace

PhaseResult run_transfer(Buffer& buffer, const TransferPlan& plan) {
  const std::uint64_t blocks = (plan.size + plan.block - 1) / plan.block;
  std::vector<PhaseResult> results(plan.threads);
  PhaseResult total;
  total.seconds = run_threads(plan.threads, [&](ThreadContext& context) {
    Worker worker(buffer, plan, slice(blocks, context.index, plan.threads));
    results[context.index] = worker.run(context);
  });
  for (auto& r : results) total.merge(std::move(r));
  return total;
}

}  // namespace smb::bench
