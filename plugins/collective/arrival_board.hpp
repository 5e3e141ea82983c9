#pragma once
// How the ranks of a collective meet (plugins/python/smb/collective/fabric.py): each rank
// writes its slot, then its arrival word, one-sided, and reads the others'
// arrival words. Over shared memory or RDMA no server CPU takes part, so an
// 8-byte allreduce costs a few reads and writes of mapped memory instead of
// a server op and a notified wait (issue 33's fixed cost).
//
// A rank that has waited `spin` without seeing every arrival sleeps on the
// buffer's version, and the rank whose arrival finds a sleeper advances it
// with one server op. Where every rank maps the buffer into its process
// (one host, UCX shared memory: Buffer::mapping), a rank sleeps on a futex
// in the buffer instead, and the arrival that finds it asleep wakes it
// with one system call: no server between the ranks (cold, 4 ranks: the
// server's wake-up cost more than gloo's whole allreduce). Each rank says
// it maps the buffer in a bitmap there; until every rank has, all sleep
// on the version. Whether a sleeper is woken rests on a Dekker pair:
// the poster writes its arrival word, then reads the sleeper word with an
// atomic; the sleeper raises the sleeper word with an atomic, then reads
// the arrival words. Atomics are ordered with everything before and after
// them (a locked instruction over shared memory, one queue pair over
// verbs, the server's order elsewhere), so either the poster sees the
// sleeper and wakes it, or the sleeper sees the arrival and does not sleep.
//
// Where this rank maps the whole board, it writes its slot and arrival and
// reads the others' with plain stores and loads there (a release store of
// the arrival after the slot, acquire loads of the arrivals before the
// slots), not through the transport: back to back at 2 ranks the board's
// part of a small allreduce was 3.5 us of five transport ops.
//
// The buffer (laid out by fabric.py, the same numbers):
//   [0, 32)    sleeper words, one per (row, parity): the generation the
//              latest sleeper on the version waits for
//   [32, 40)   the word the wake-up op adds 0 to (the op advances the version)
//   [40, 48)   bit r: rank r maps the buffer (ranks 0-63; more: never local)
//   [48, 52)   the futex word (u32): local wake-ups add 1 to it
//   [64, 96)   local sleeper words, one per (row, parity), as [0, 32)
//   [96, ...)  arrival words, u64, [row][parity][rank]: the generation a
//              rank last reached in that row (row 0: arrival with its slot,
//              row 1: done with its share of a reduction by the ranks)
//   slots_at   the slots, [parity][rank] of slot_bytes each:
//              u64 generation, u64 key, u32 meta bytes, u32 payload bytes,
//              the payload (padded to 8), the metadata (JSON)
// Generations alternate between two parities: a rank arriving at g has
// finished g - 1, so every rank has finished g - 2 and its parity is free.
#include <smb/client.hpp>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace smb::python {

class ArrivalBoard {
 public:
  static constexpr std::uint64_t kSleepersAt = 0, kWakeWordAt = 32, kMappedRanksAt = 40, kFutexAt = 48,
                                  kLocalSleepersAt = 64, kArrivalsAt = 96, kSlotHeader = 24;

  // `slots` holds both the words and the slots (one buffer per collective).
  ArrivalBoard(Buffer& buffer, std::uint32_t size, std::uint32_t index, std::uint64_t slot_bytes,
               std::chrono::microseconds spin);

  static std::uint64_t slots_at(std::uint32_t size);  // where the slots begin
  std::uint64_t slot_offset(std::uint64_t generation, std::uint32_t rank) const;

  // Writes this rank's slot of generation g (key: the metadata's hash,
  // which reduce() compares), then its arrival.
  void post(std::uint64_t generation, std::uint64_t key, std::span<const std::byte> payload,
            std::span<const std::byte> meta);
  // Writes this rank's slot of generation g with no arrival: a rank giving
  // up marks it so, and the others' checks find it.
  void write_slot(std::uint64_t generation, std::uint64_t key, std::span<const std::byte> payload,
                  std::span<const std::byte> meta);
  // This rank reached generation g in `row` (no slot): row 1's "done".
  void mark(std::uint32_t row, std::uint64_t generation);

  // Whether every rank outside `skip` reached g in `row`: spins up to the
  // spin time, then sleeps (see above) up to `timeout` in all.
  bool wait(std::uint32_t row, std::uint64_t generation, const std::vector<std::uint32_t>& skip,
            std::chrono::microseconds timeout);
  // The generation each rank last reached in `row` at g's parity.
  std::vector<std::uint64_t> reached(std::uint32_t row, std::uint64_t generation);

  // After every rank outside `skip` arrived at g: reduces their payloads
  // (set order, the same bits on every rank) into `out`. False where a
  // slot is not of g or its key or size differs from this rank's: the
  // caller then reads the slots and names the mismatch.
  bool reduce(std::uint64_t generation, std::uint64_t key, DType type, const std::string& op,
              std::span<std::byte> out, const std::vector<std::uint32_t>& skip);
  static bool reducible(DType type);

  // What this rank's waits did, for tests and tuning: waits that went to
  // sleep, sleeps ended by a wake-up (not a timeout), and wake-ups this
  // rank's arrivals sent; of the sleeps, those on the futex (every rank
  // maps the buffer).
  struct Counters {
    std::uint64_t sleeps = 0, woken = 0, wakeups_sent = 0, local_sleeps = 0;
  };
  const Counters& counters() const { return counters_; }
  // Whether slots and arrivals are plain loads and stores in this process.
  bool maps_board() const { return whole_ != nullptr; }

  // post(), wait() up to `first_wait` and reduce() in one call: the whole
  // of a small allreduce where every rank comes in time.
  enum class Outcome { reduced, waiting, mismatch };
  Outcome allreduce(std::uint64_t generation, std::uint64_t key, std::span<const std::byte> payload,
                    std::span<const std::byte> meta, DType type, const std::string& op, std::span<std::byte> out,
                    std::chrono::microseconds first_wait);

 private:
  std::uint64_t arrival_offset(std::uint32_t row, std::uint64_t generation, std::uint32_t rank) const;
  std::uint64_t sleeper_offset(std::uint32_t row, std::uint64_t generation) const;
  void arrive(std::uint32_t row, std::uint64_t generation);
  std::uint64_t server_sleeper(std::uint32_t row, std::uint64_t generation);  // after this rank's arrival
  void read_arrivals(std::uint32_t row, std::uint64_t generation);           // into words_
  bool all_reached(std::uint32_t row, std::uint64_t generation, const std::vector<std::uint32_t>& skip);
  bool sleep_until(std::uint32_t row, std::uint64_t generation, const std::vector<std::uint32_t>& skip,
                   std::chrono::steady_clock::time_point deadline);
  bool sleep_locally(std::uint32_t row, std::uint64_t generation, const std::vector<std::uint32_t>& skip,
                     std::chrono::steady_clock::time_point deadline);
  bool everyone_maps();  // every rank's bit is set (then it stays so)
  unsigned yield_every();  // a spinning wait yields its core once in so many rounds
  std::uint64_t& word_at(std::uint64_t offset) const;  // a word of the mapping
  std::uint32_t* futex_word() const;                    // the futex word in the mapping

  Buffer& buffer_;
  std::uint32_t size_, index_;
  std::uint64_t slot_bytes_;
  std::chrono::microseconds spin_;
  std::byte* mapped_;           // the words [0, kArrivalsAt) in this process, or null
  std::byte* whole_;            // the whole board (mapped_ too) in this process, or null
  bool everyone_maps_ = false;  // seen once: ranks never clear their bit
  unsigned yield_every_ = 0;    // 0: not yet known (until everyone maps)
  std::vector<std::uint64_t> words_;  // scratch: one row of arrival words
  std::vector<std::byte> slot_;       // scratch: a slot being written or read
  Counters counters_;
};

}  // namespace smb::python
