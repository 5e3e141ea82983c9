// smb._core.ArrivalBoard: how the ranks of a smb.collective collective
// meet (arrival_board.hpp), in C++ because it is the fixed cost of every
// collective. Every call that touches the fabric releases the GIL.
#include "arrival_board.hpp"
#include "bindings.hpp"
#include "mapped_shard.hpp"
#include "rank_reduction.hpp"
#include "host_memory.hpp"

#include <pybind11/stl.h>

namespace py = pybind11;

namespace smb::python {
namespace {

std::chrono::microseconds micros(double seconds) {
  return std::chrono::microseconds(static_cast<std::int64_t>(std::max(0.0, seconds) * 1e6 + 0.5));
}

DType reduced_dtype(const std::string& name) {
  const auto type = parse_dtype(name);
  if (!type) throw Error(Errc::invalid_argument, "unknown dtype '" + name + "'");
  return *type;
}

std::span<const std::byte> payload_of(const py::handle& payload, HostMemory& mem) {
  if (payload.is_none()) return {};
  mem = host_memory(payload, false);
  return {mem.data, mem.size};
}

// post() (arrive = true) or write_slot().
void write_slot(ArrivalBoard& b, std::uint64_t g, std::uint64_t key, const py::handle& payload,
                const py::bytes& meta, bool arrive) {
  HostMemory mem;
  const auto data = payload_of(payload, mem);
  const std::string_view text = meta;
  const auto meta_bytes = std::as_bytes(std::span(text.data(), text.size()));
  py::gil_scoped_release nogil;
  if (arrive)
    b.post(g, key, data, meta_bytes);
  else
    b.write_slot(g, key, data, meta_bytes);
}

// One signature's small allreduce with its fixed arguments converted once
// (smb.torch's lane, ops.py, through fabric.InlineLane): each call passes
// only the addresses of the tensors' bytes. The buffer protocol, bytes and
// string conversions of ArrivalBoard.allreduce were most of what Python
// added to a few-microsecond collective; so are the generation's
// bookkeeping and a float result's scaling (torch's mul_ alone costs 5 us),
// which the lane does here.
struct AllreduceLane {
  ArrivalBoard& board;
  py::object collective;  // the fabric.Collective: its generation and joined ranks, as its _post() keeps them
  std::uint64_t key;
  std::string meta;
  DType type;
  std::string op;
  std::uint64_t nbytes;
  std::chrono::microseconds first_wait;
  double factor;  // what the result is scaled by here: 1 where scales_in_place(type) is false
  py::str generation_attr{"generation"};  // (made once: a lookup by C string makes a str each time)
  py::str joined_attr{"joined"};

  // `in` and `out`: addresses of nbytes each that the caller keeps alive
  // (its tensors) for the call. The collective moves to the next generation
  // unless the board refused the slot before writing anything
  // (invalid_argument); a result it reduced is scaled (not one
  // the caller reduces after a late rank: joined ranks' zeros come first).
  int call(std::uintptr_t in, std::uintptr_t out) {
    const auto g = collective.attr(generation_attr).cast<std::uint64_t>() + 1;
    collective.attr(joined_attr) = py::set();
    ArrivalBoard::Outcome outcome{};
    try {
      py::gil_scoped_release nogil;
      outcome = run(g, in, out);
    } catch (const Error& e) {
      if (e.code() != Errc::invalid_argument) collective.attr(generation_attr) = g;  // posted, or maybe
      throw;
    } catch (...) {
      collective.attr(generation_attr) = g;
      throw;
    }
    collective.attr(generation_attr) = g;
    if (outcome == ArrivalBoard::Outcome::reduced && factor != 1.0)
      scale_in_place(type, {reinterpret_cast<std::byte*>(out), nbytes}, factor);
    return static_cast<int>(outcome);
  }

 private:
  ArrivalBoard::Outcome run(std::uint64_t g, std::uintptr_t in, std::uintptr_t out) {
    const auto meta_bytes = std::as_bytes(std::span(meta.data(), meta.size()));
    const std::span payload(reinterpret_cast<const std::byte*>(in), nbytes);
    const std::span result(reinterpret_cast<std::byte*>(out), nbytes);
    return board.allreduce(g, key, payload, meta_bytes, type, op, result, first_wait);
  }
};

}  // namespace

void bind_collective(py::module_& m) {
  auto board = py::class_<ArrivalBoard>(m, "ArrivalBoard");
  board.attr("REDUCED") = static_cast<int>(ArrivalBoard::Outcome::reduced);
  board.attr("WAITING") = static_cast<int>(ArrivalBoard::Outcome::waiting);
  board.attr("MISMATCH") = static_cast<int>(ArrivalBoard::Outcome::mismatch);
  board
      .def(py::init([](Buffer& buffer, std::uint32_t size, std::uint32_t index, std::uint64_t slot_bytes,
                       double spin_s) { return ArrivalBoard(buffer, size, index, slot_bytes, micros(spin_s)); }),
           py::keep_alive<1, 2>())
      .def_static("slots_at", &ArrivalBoard::slots_at)
      .def("slot_offset", &ArrivalBoard::slot_offset)
      .def_property_readonly("counters",
                             [](const ArrivalBoard& b) {
                               const auto& c = b.counters();
                               return py::dict(py::arg("sleeps") = c.sleeps, py::arg("woken") = c.woken,
                                               py::arg("wakeups_sent") = c.wakeups_sent,
                                               py::arg("local_sleeps") = c.local_sleeps);
                             })
      .def("post",
           [](ArrivalBoard& b, std::uint64_t g, std::uint64_t key, py::handle payload, const py::bytes& meta) {
             write_slot(b, g, key, payload, meta, true);
           })
      .def("write_slot",
           [](ArrivalBoard& b, std::uint64_t g, std::uint64_t key, py::handle payload, const py::bytes& meta) {
             write_slot(b, g, key, payload, meta, false);
           })
      .def("mark",
           [](ArrivalBoard& b, std::uint32_t row, std::uint64_t g) {
             py::gil_scoped_release nogil;
             b.mark(row, g);
           })
      .def("wait",
           [](ArrivalBoard& b, std::uint32_t row, std::uint64_t g, const std::vector<std::uint32_t>& skip,
              double timeout_s) {
             py::gil_scoped_release nogil;
             return b.wait(row, g, skip, micros(timeout_s));
           })
      .def("reached",
           [](ArrivalBoard& b, std::uint32_t row, std::uint64_t g) {
             py::gil_scoped_release nogil;
             return b.reached(row, g);
           })
      .def("allreduce",
           [](ArrivalBoard& b, std::uint64_t g, std::uint64_t key, py::handle payload, const py::bytes& meta,
              const std::string& dtype, const std::string& op, py::handle out, double first_wait_s) {
             const auto type = reduced_dtype(dtype);
             HostMemory in;
             const auto data = payload_of(payload, in);
             const auto mem = host_memory(out, true);
             const std::string_view text = meta;
             py::gil_scoped_release nogil;
             return static_cast<int>(b.allreduce(g, key, data, std::as_bytes(std::span(text.data(), text.size())),
                                                 type, op, {mem.data, mem.size}, micros(first_wait_s)));
           })
      .def("reduce", [](ArrivalBoard& b, std::uint64_t g, std::uint64_t key, const std::string& dtype,
                        const std::string& op, py::handle out, const std::vector<std::uint32_t>& skip) {
        const auto type = reduced_dtype(dtype);
        const auto mem = host_memory(out, true);
        py::gil_scoped_release nogil;
        return b.reduce(g, key, type, op, {mem.data, mem.size}, skip);
      });

  // A large allreduce's shard reduced on this rank in the mapping (mapped_shard.hpp).
  m.def("maps_regions", &maps_regions, py::arg("buffer"), py::arg("offsets"), py::arg("offset"), py::arg("length"),
        py::arg("stripe_unit"));
  m.def(
      "reduce_mapped_shard",
      [](Buffer& b, const std::string& dtype, const std::string& op, std::uint64_t result,
         const std::vector<std::uint64_t>& inputs, std::uint64_t lo, std::uint64_t hi, std::uint64_t stripe_unit) {
        const auto type = reduced_dtype(dtype);
        py::gil_scoped_release nogil;
        return reduce_mapped_shard(b, type, op, result, inputs, lo, hi, stripe_unit);
      },
      py::arg("buffer"), py::arg("dtype"), py::arg("op"), py::arg("result"), py::arg("inputs"), py::arg("lo"),
      py::arg("hi"), py::arg("stripe_unit"));

  py::class_<AllreduceLane>(m, "AllreduceLane")
      .def(py::init([](ArrivalBoard& b, py::object collective, std::uint64_t key, const py::bytes& meta,
                       const std::string& dtype, const std::string& op, std::uint64_t nbytes, double first_wait_s,
                       double factor) {
             const auto type = reduced_dtype(dtype);
             if (!ArrivalBoard::reducible(type))
               throw Error(Errc::invalid_argument, "an allreduce lane of dtype '" + dtype + "': C++ does not reduce it");
             static_cast<void>(RankReduction(type, op));  // throws for an op the board would refuse on every call
             return AllreduceLane{b,      std::move(collective), key, std::string(meta), type, op, nbytes,
                                  micros(first_wait_s), scales_in_place(type) ? factor : 1.0};
           }),
           py::keep_alive<1, 2>())
      .def("call", &AllreduceLane::call)
      .def_property_readonly("factor", [](const AllreduceLane& lane) { return lane.factor; });
}

}  // namespace smb::python
