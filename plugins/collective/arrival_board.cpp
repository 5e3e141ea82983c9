#include "arrival_board.hpp"

#include "rank_reduction.hpp"

#include <smb/error.hpp>

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <new>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace smb::python {
namespace {

constexpr std::uint32_t kRows = 2;

void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

std::span<const std::byte> word_bytes(const std::uint64_t& word) { return std::as_bytes(std::span(&word, 1)); }

bool skipped(const std::vector<std::uint32_t>& skip, std::uint32_t rank) {
  return std::find(skip.begin(), skip.end(), rank) != skip.end();
}

std::uint64_t padded(std::uint64_t n) { return (n + 7) / 8 * 8; }

}  // namespace

ArrivalBoard::ArrivalBoard(Buffer& buffer, std::uint32_t size, std::uint32_t index, std::uint64_t slot_bytes,
                           std::chrono::microseconds spin)
    : buffer_(buffer), size_(size), index_(index), slot_bytes_(slot_bytes), spin_(spin), mapped_(nullptr),
      whole_(nullptr), words_(size) {
  if (size == 0 || index >= size) throw Error(Errc::invalid_argument, "arrival board: rank outside its set");
  if (slot_bytes < kSlotHeader) throw Error(Errc::invalid_argument, "arrival board: slots too small");
  const std::uint64_t bytes = slots_at(size) + 2 * size * slot_bytes;
  if (buffer.size() < bytes)
    throw Error(Errc::invalid_argument, "arrival board: buffer '" + buffer.name() + "' too small for " +
                                            std::to_string(size) + " slots of " + std::to_string(slot_bytes));
  if (size > 64) return;  // one bit per rank
  whole_ = buffer.mapping(0, bytes);
  mapped_ = whole_ != nullptr ? whole_ : buffer.mapping(0, kArrivalsAt);
  if (mapped_ == nullptr) return;
  std::atomic_ref<std::uint64_t> bits(word_at(kMappedRanksAt));
  const std::uint64_t mine = std::uint64_t{1} << index;
  if ((bits.load() & mine) == 0) bits.fetch_add(mine);  // (only this rank sets its bit)
}

std::uint64_t& ArrivalBoard::word_at(std::uint64_t offset) const {
  return *std::launder(reinterpret_cast<std::uint64_t*>(mapped_ + offset));
}

std::uint32_t* ArrivalBoard::futex_word() const {
  return std::launder(reinterpret_cast<std::uint32_t*>(mapped_ + kFutexAt));
}

bool ArrivalBoard::everyone_maps() {
  if (everyone_maps_ || mapped_ == nullptr) return everyone_maps_;
  const std::uint64_t all = size_ == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << size_) - 1;
  everyone_maps_ = std::atomic_ref<std::uint64_t>(word_at(kMappedRanksAt)).load() == all;
  return everyone_maps_;
}

unsigned ArrivalBoard::yield_every() {
  if (yield_every_ == 0 && everyone_maps()) {  // every rank on this host: count the cores they share
    cpu_set_t cpus;
    const bool known = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0;
    yield_every_ = known && static_cast<std::uint32_t>(CPU_COUNT(&cpus)) < size_ ? 1 : 64;
  }
  return yield_every_ == 0 ? 64 : yield_every_;
}

std::uint64_t ArrivalBoard::slots_at(std::uint32_t size) { return kArrivalsAt + padded(kRows * 2 * 8 * size); }

std::uint64_t ArrivalBoard::slot_offset(std::uint64_t generation, std::uint32_t rank) const {
  return slots_at(size_) + ((generation % 2) * size_ + rank) * slot_bytes_;
}

std::uint64_t ArrivalBoard::arrival_offset(std::uint32_t row, std::uint64_t generation, std::uint32_t rank) const {
  return kArrivalsAt + 8 * ((row * 2 + generation % 2) * size_ + rank);
}

std::uint64_t ArrivalBoard::sleeper_offset(std::uint32_t row, std::uint64_t generation) const {
  return kSleepersAt + 8 * (row * 2 + generation % 2);
}

namespace {
std::uint64_t local_sleeper_offset(std::uint32_t row, std::uint64_t generation) {
  return ArrivalBoard::kLocalSleepersAt + 8 * (row * 2 + generation % 2);
}

// The futex word is shared between processes (the buffer's memory is), so
// no FUTEX_PRIVATE_FLAG.
std::uint32_t futex_load(std::uint32_t* word) { return std::atomic_ref<std::uint32_t>(*word).load(); }
void futex_wait(std::uint32_t* word, std::uint32_t seen, std::chrono::nanoseconds limit) {
  const timespec ts{static_cast<time_t>(limit.count() / 1000000000), static_cast<long>(limit.count() % 1000000000)};
  ::syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, nullptr, 0);
}
// Adds 1 first, so that a sleeper about to wait on the old value does not.
void futex_wake_all(std::uint32_t* word) {
  std::atomic_ref<std::uint32_t>(*word).fetch_add(1);
  ::syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// A slot's bytes at `at` (kSlotHeader + padded(payload) + meta of them).
void lay_out_slot(std::byte* at, std::uint64_t generation, std::uint64_t key, std::span<const std::byte> payload,
                  std::span<const std::byte> meta) {
  const auto meta_bytes = static_cast<std::uint32_t>(meta.size());
  const auto payload_bytes = static_cast<std::uint32_t>(payload.size());
  std::memcpy(at, &generation, 8);
  std::memcpy(at + 8, &key, 8);
  std::memcpy(at + 16, &meta_bytes, 4);
  std::memcpy(at + 20, &payload_bytes, 4);
  std::byte* rest = at + ArrivalBoard::kSlotHeader;
  if (!payload.empty()) std::memcpy(rest, payload.data(), payload.size());
  std::memset(rest + payload.size(), 0, padded(payload.size()) - payload.size());
  if (!meta.empty()) std::memcpy(rest + padded(payload.size()), meta.data(), meta.size());
}
}  // namespace

void ArrivalBoard::write_slot(std::uint64_t generation, std::uint64_t key, std::span<const std::byte> payload,
                              std::span<const std::byte> meta) {
  const std::uint64_t bytes = kSlotHeader + padded(payload.size()) + meta.size();
  if (bytes > slot_bytes_)
    throw Error(Errc::invalid_argument, "collective slot: " + std::to_string(meta.size()) + " bytes of metadata and " +
                                            std::to_string(payload.size()) + " of tensor do not fit its " +
                                            std::to_string(slot_bytes_));
  // Mapped: in place (the arrival's release store publishes it); else
  // composed here and written in one op.
  if (whole_ != nullptr) return lay_out_slot(whole_ + slot_offset(generation, index_), generation, key, payload, meta);
  slot_.resize(bytes);
  lay_out_slot(slot_.data(), generation, key, payload, meta);
  buffer_.write(slot_offset(generation, index_), slot_);
}

void ArrivalBoard::post(std::uint64_t generation, std::uint64_t key, std::span<const std::byte> payload,
                        std::span<const std::byte> meta) {
  write_slot(generation, key, payload, meta);  // visible before the arrival that announces it
  arrive(0, generation);
}

void ArrivalBoard::mark(std::uint32_t row, std::uint64_t generation) {
  if (row >= kRows) throw Error(Errc::invalid_argument, "arrival board: no row " + std::to_string(row));
  arrive(row, generation);
}

void ArrivalBoard::arrive(std::uint32_t row, std::uint64_t generation) {
  const std::uint64_t at = arrival_offset(row, generation, index_);
  if (whole_ != nullptr)
    std::atomic_ref<std::uint64_t>(word_at(at)).store(generation, std::memory_order_release);
  else
    buffer_.write(at, word_bytes(generation));
  if (server_sleeper(row, generation) == generation) {
    const std::uint64_t zero = 0;
    buffer_.apply(VectorOp::accumulate, DType::i64, kWakeWordAt, 1, 1.0, word_bytes(zero));
    ++counters_.wakeups_sent;
  }
  if (mapped_ == nullptr) return;  // then no rank sleeps locally
  // The same pair with the local sleepers: the arrival above, then (the
  // fence orders them) their word.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (std::atomic_ref<std::uint64_t>(word_at(local_sleeper_offset(row, generation))).load() == generation) {
    futex_wake_all(futex_word());
    ++counters_.wakeups_sent;
  }
}

std::uint64_t ArrivalBoard::server_sleeper(std::uint32_t row, std::uint64_t generation) {
  // Where every rank maps the buffer, every op on the word is a CPU's on
  // this host (UCX shared memory's atomics are locked instructions on the
  // mapping), so a load after a full fence stands for the atomic below.
  // Elsewhere a NIC or a server may apply a sleeper's compare-swap, and
  // only an atomic through the same path is ordered with it.
  if (whole_ != nullptr && everyone_maps()) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return std::atomic_ref<std::uint64_t>(word_at(sleeper_offset(row, generation))).load();
  }
  // The atomic orders the arrival's write before this read (the Dekker pair above).
  return buffer_.fetch_add(sleeper_offset(row, generation), 0);
}

std::vector<std::uint64_t> ArrivalBoard::reached(std::uint32_t row, std::uint64_t generation) {
  if (row >= kRows) throw Error(Errc::invalid_argument, "arrival board: no row " + std::to_string(row));
  read_arrivals(row, generation);
  return words_;
}

void ArrivalBoard::read_arrivals(std::uint32_t row, std::uint64_t generation) {
  if (whole_ == nullptr)
    return buffer_.read(arrival_offset(row, generation, 0), std::as_writable_bytes(std::span(words_)));
  // Acquire: a rank's slot, written before its arrival, is read after.
  for (std::uint32_t r = 0; r < size_; ++r)
    words_[r] = std::atomic_ref<std::uint64_t>(word_at(arrival_offset(row, generation, r)))
                    .load(std::memory_order_acquire);
}

bool ArrivalBoard::all_reached(std::uint32_t row, std::uint64_t generation, const std::vector<std::uint32_t>& skip) {
  read_arrivals(row, generation);
  for (std::uint32_t r = 0; r < size_; ++r)
    if (words_[r] < generation && !skipped(skip, r)) return false;
  return true;
}

bool ArrivalBoard::wait(std::uint32_t row, std::uint64_t generation, const std::vector<std::uint32_t>& skip,
                        std::chrono::microseconds timeout) {
  if (row >= kRows) throw Error(Errc::invalid_argument, "arrival board: no row " + std::to_string(row));
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  const auto spin_end = std::min(deadline, start + spin_);
  const unsigned every = yield_every();  // a spinning wait yields its core once in so many rounds
  for (unsigned round = 0;; ++round) {
    if (all_reached(row, generation, skip)) return true;
    if (std::chrono::steady_clock::now() >= spin_end) break;
    // Mostly pause, now and then give the core away: ranks may outnumber
    // cores. Where they do on this host, every round: a late rank that
    // waits for a core delays everyone (4 ranks on 2 cores, back to back:
    // 13 us a call yielding every 64 rounds, 10 us every round).
    if (round % every == every - 1)
      std::this_thread::yield();
    else
      cpu_relax();
  }
  return sleep_until(row, generation, skip, deadline);
}

bool ArrivalBoard::sleep_until(std::uint32_t row, std::uint64_t generation, const std::vector<std::uint32_t>& skip,
                               std::chrono::steady_clock::time_point deadline) {
  const std::uint64_t at = sleeper_offset(row, generation);
  if (std::chrono::steady_clock::now() >= deadline) return false;  // a poll, not a wait: no sleeper word
  if (everyone_maps()) return sleep_locally(row, generation, skip, deadline);
  while (true) {
    const std::uint64_t version = buffer_.version();  // before the sleeper word: a wake-up after it counts
    std::uint64_t seen = buffer_.fetch_add(at, 0);
    while (seen < generation) {
      const std::uint64_t before = buffer_.compare_swap(at, seen, generation);
      if (before == seen) break;
      seen = before;
    }
    if (all_reached(row, generation, skip)) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    ++counters_.sleeps;
    try {
      buffer_.wait_version(version + 1, std::max(left, std::chrono::milliseconds(1)));
      ++counters_.woken;
    } catch (const Error& e) {
      if (e.code() != Errc::timeout) throw;
      return all_reached(row, generation, skip);
    }
  }
}

// sleep_until's local form: every waker maps the buffer and looks at the
// local sleeper word after its arrival, so a sleeper needs no server.
bool ArrivalBoard::sleep_locally(std::uint32_t row, std::uint64_t generation, const std::vector<std::uint32_t>& skip,
                                 std::chrono::steady_clock::time_point deadline) {
  std::uint32_t* futex = futex_word();
  std::atomic_ref<std::uint64_t> sleeper(word_at(local_sleeper_offset(row, generation)));
  while (true) {
    const std::uint32_t seen = futex_load(futex);  // before the sleeper word
    std::uint64_t latest = sleeper.load();
    while (latest < generation && !sleeper.compare_exchange_weak(latest, generation)) {
    }
    // The word above before the arrival words below (a locked instruction
    // on x86 already; a barrier where atomics alone do not order a later
    // plain load).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (all_reached(row, generation, skip)) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    ++counters_.sleeps;
    ++counters_.local_sleeps;
    futex_wait(futex, seen, deadline - now);
    if (futex_load(futex) != seen) ++counters_.woken;
  }
}

bool ArrivalBoard::reducible(DType type) { return reducible_on_ranks(type); }

bool ArrivalBoard::reduce(std::uint64_t generation, std::uint64_t key, DType type, const std::string& op,
                          std::span<std::byte> out, const std::vector<std::uint32_t>& skip) {
  const RankReduction how(type, op);
  const std::uint64_t bytes = kSlotHeader + out.size();
  if (bytes > slot_bytes_) return false;
  // One read from the first rank's slot to the end of the last one's
  // payload (at most 64 KiB, fabric.py's inline_capacity): where the server
  // moves the bytes (TCP) one round trip, not one per rank.
  // Mapped: read in place (no rank rewrites g's slots before every rank,
  // this one included, has arrived at g + 1).
  const std::byte* slots = whole_ != nullptr ? whole_ + slot_offset(generation, 0) : nullptr;
  if (slots == nullptr) {
    slot_.resize((size_ - 1) * slot_bytes_ + bytes);
    buffer_.read(slot_offset(generation, 0), slot_);
    slots = slot_.data();
  }
  bool first = true;
  for (std::uint32_t r = 0; r < size_; ++r) {
    if (skipped(skip, r)) continue;
    const std::byte* slot = slots + r * slot_bytes_;
    std::uint64_t g = 0, k = 0;
    std::uint32_t payload_bytes = 0;
    std::memcpy(&g, slot, 8);
    std::memcpy(&k, slot + 8, 8);
    std::memcpy(&payload_bytes, slot + 20, 4);
    if (g != generation || k != key || payload_bytes != out.size()) return false;
    if (first)
      std::memcpy(out.data(), slot + kSlotHeader, out.size());
    else
      how.combine_into(out, slot + kSlotHeader);
    first = false;
  }
  return true;
}

ArrivalBoard::Outcome ArrivalBoard::allreduce(std::uint64_t generation, std::uint64_t key,
                                              std::span<const std::byte> payload, std::span<const std::byte> meta,
                                              DType type, const std::string& op, std::span<std::byte> out,
                                              std::chrono::microseconds first_wait) {
  static const std::vector<std::uint32_t> none;
  post(generation, key, payload, meta);
  if (!wait(0, generation, none, first_wait)) return Outcome::waiting;
  return reduce(generation, key, type, op, out, none) ? Outcome::reduced : Outcome::mismatch;
}

}  // namespace smb::python
