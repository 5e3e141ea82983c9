// smb._core.Client, Buffer, Request, Lock, Registration: libsmb's C++ API,
// low-level (seconds as floats, ops and dtypes as names); smb/__init__.py
// wraps them in the documented Python API. Every transfer and wait runs
// with the GIL released, on the caller's memory in place.
#include "bindings.hpp"
#include "host_memory.hpp"

#include <smb/client.hpp>

#include <pybind11/stl.h>

#include <chrono>
#include <thread>

namespace py = pybind11;

namespace smb::python {
namespace {

std::chrono::milliseconds millis(double seconds, const char* what) {
  if (!(seconds > 0)) throw Error(Errc::invalid_argument, std::string(what) + " must be a positive number of seconds");
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0 + 0.5));
}

VectorOp op_named(const std::string& name) {
  if (auto op = parse_vector_op(name)) return *op;
  throw Error(Errc::invalid_argument, "unknown vector op '" + name + "'");
}

DType dtype_named(const std::string& name) {
  if (auto t = parse_dtype(name)) return *t;
  throw Error(Errc::invalid_argument, "unknown dtype '" + name + "'");
}

std::span<const std::byte> bytes_of(const HostMemory& m) { return {m.data, m.size}; }
std::span<std::byte> writable_bytes_of(const HostMemory& m) { return {m.data, m.size}; }

// An asynchronous transfer and the memory it uses. Dropping it before it
// completed waits for it: the transport may still write into that memory.
class PyRequest {
 public:
  PyRequest(Request request, std::shared_ptr<void> keep) : request_(std::move(request)), keep_(std::move(keep)) {}
  PyRequest(PyRequest&&) = default;
  PyRequest& operator=(PyRequest&&) = default;
  ~PyRequest() {
    if (done_ || !request_.valid()) return;
    try {
      py::gil_scoped_release nogil;
      request_.wait();
    } catch (const Error&) {
    }
  }
  // Waits up to `timeout` seconds (None: the client's timeout); raises
  // smb.Timeout if it is still running then, or the transfer's error.
  void wait(std::optional<double> timeout) {
    if (done_) return;
    py::gil_scoped_release nogil;
    if (!timeout) {
      try {
        request_.wait();
      } catch (...) {
        done_ = true;
        throw;
      }
      done_ = true;
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + millis(*timeout, "timeout");
    while (!test()) {
      if (std::chrono::steady_clock::now() >= deadline)
        throw Error(Errc::timeout, "request not done within " + std::to_string(*timeout) + " s (still in flight)");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  bool done() {
    if (done_) return true;
    py::gil_scoped_release nogil;
    return test();
  }

 private:
  // Drives progress once; true (and done) once finished, its error raised once.
  bool test() {
    try {
      if (!request_.test()) return false;
    } catch (...) {
      done_ = true;
      throw;
    }
    done_ = true;
    return true;
  }

  Request request_;
  std::shared_ptr<void> keep_;
  bool done_ = false;
};

// A registration and the object whose memory it pins.
struct PyRegistration {
  MemoryRegistration registration;
  std::shared_ptr<void> keep;
};

void bind_buffer(py::module_& m) {
  py::class_<Buffer>(m, "Buffer")
      .def_property_readonly("name", &Buffer::name)
      .def_property_readonly("size", &Buffer::size)
      .def_property_readonly("layout", &Buffer::layout)
      .def("write",
           [](Buffer& b, std::uint64_t offset, py::handle data) {
             const auto mem = host_memory(data, false);
             py::gil_scoped_release nogil;
             b.write(offset, bytes_of(mem));
           })
      .def("read",
           [](Buffer& b, std::uint64_t offset, py::handle out) {
             const auto mem = host_memory(out, true);
             py::gil_scoped_release nogil;
             b.read(offset, writable_bytes_of(mem));
           })
      .def("write_async",
           [](Buffer& b, std::uint64_t offset, py::handle data) {
             const auto mem = host_memory(data, false);
             Request request;
             {
               py::gil_scoped_release nogil;
               request = b.write_async(offset, bytes_of(mem));
             }
             return PyRequest(std::move(request), mem.keep);
           })
      .def("read_async",
           [](Buffer& b, std::uint64_t offset, py::handle out) {
             const auto mem = host_memory(out, true);
             Request request;
             {
               py::gil_scoped_release nogil;
               request = b.read_async(offset, writable_bytes_of(mem));
             }
             return PyRequest(std::move(request), mem.keep);
           })
      .def("fetch_add",
           [](Buffer& b, std::uint64_t offset, std::uint64_t value) {
             py::gil_scoped_release nogil;
             return b.fetch_add(offset, value);
           })
      .def("compare_swap",
           [](Buffer& b, std::uint64_t offset, std::uint64_t expected, std::uint64_t desired) {
             py::gil_scoped_release nogil;
             return b.compare_swap(offset, expected, desired);
           })
      .def("apply",
           [](Buffer& b, const std::string& op, const std::string& dtype, std::uint64_t offset, std::uint64_t count,
              double alpha, py::object x) {
             const auto o = op_named(op);
             const auto t = dtype_named(dtype);
             if (x.is_none()) {
               py::gil_scoped_release nogil;
               b.apply(o, t, offset, count, alpha);
               return;
             }
             const auto mem = host_memory(x, false);
             py::gil_scoped_release nogil;
             b.apply(o, t, offset, count, alpha, bytes_of(mem));
           })
      .def("apply_from",
           [](Buffer& b, const std::string& op, const std::string& dtype, std::uint64_t offset, std::uint64_t count,
              double alpha, const Buffer& source, std::uint64_t source_offset) {
             const auto o = op_named(op);
             const auto t = dtype_named(dtype);
             py::gil_scoped_release nogil;
             b.apply_from(o, t, offset, count, alpha, source, source_offset);
           })
      .def("version",
           [](Buffer& b) {
             py::gil_scoped_release nogil;
             return b.version();
           })
      .def("wait_version",
           [](Buffer& b, std::uint64_t version, double timeout) {
             const auto limit = millis(timeout, "timeout");
             py::gil_scoped_release nogil;
             return b.wait_version(version, limit);
           })
      .def("close", [](Buffer& b) {
        py::gil_scoped_release nogil;
        b.close();
      });

  py::class_<PyRequest>(m, "Request")
      .def("wait", &PyRequest::wait, py::arg("timeout") = py::none())
      .def("done", &PyRequest::done);
}

void bind_client(py::module_& m) {
  py::class_<Lock>(m, "Lock")
      .def("unlock",
           [](Lock& l) {
             py::gil_scoped_release nogil;
             l.unlock();
           })
      .def_property_readonly("held", &Lock::held);

  py::class_<PyRegistration>(m, "Registration")
      .def("unregister",
           [](PyRegistration& r) {
             r.registration.unregister();
             r.keep.reset();
           })
      .def_property_readonly("valid", [](const PyRegistration& r) { return r.registration.valid(); });

  py::class_<Client>(m, "Client")
      .def(py::init([](std::vector<std::string> servers, double timeout, std::string transport,
                       std::map<std::string, std::string> transport_options, std::string auth_token_file) {
             ClientOptions options;
             options.auth_token_file = std::move(auth_token_file);
             options.servers = std::move(servers);
             options.timeout = millis(timeout, "timeout");
             options.transport = std::move(transport);
             options.transport_options = std::move(transport_options);
             py::gil_scoped_release nogil;
             return Client(std::move(options));
           }),
           py::arg("servers"), py::arg("timeout"), py::arg("transport"), py::arg("transport_options"),
           py::arg("auth_token_file"))
      .def("create",
           [](Client& c, const std::string& name, std::uint64_t size, std::uint64_t stripe_unit,
              std::vector<std::string> servers, std::uint32_t replicas) {
             BufferOptions o{stripe_unit, std::move(servers), replicas};
             py::gil_scoped_release nogil;
             return c.create(name, size, o);
           })
      .def("open",
           [](Client& c, const std::string& name) {
             py::gil_scoped_release nogil;
             return c.open(name);
           })
      .def("open_or_create",
           [](Client& c, const std::string& name, std::uint64_t size, std::uint64_t stripe_unit,
              std::vector<std::string> servers, std::uint32_t replicas) {
             BufferOptions o{stripe_unit, std::move(servers), replicas};
             py::gil_scoped_release nogil;
             return c.open_or_create(name, size, o);
           })
      .def("destroy",
           [](Client& c, const std::string& name) {
             py::gil_scoped_release nogil;
             c.destroy(name);
           })
      .def("save",
           [](Client& c, const std::string& name, const std::string& path) {
             py::gil_scoped_release nogil;
             return c.save(name, path);
           })
      .def("load",
           [](Client& c, const std::string& path, const std::string& name, std::uint64_t stripe_unit,
              std::vector<std::string> servers) {
             // stripe unit 0 and no servers: where the checkpoint says, on all of the client's servers
             std::optional<BufferOptions> o;
             if (stripe_unit != 0 || !servers.empty()) o = BufferOptions{stripe_unit ? stripe_unit : (1u << 20), std::move(servers), 1};
             py::gil_scoped_release nogil;
             return c.load(path, name, o);
           })
      .def("lock",
           [](Client& c, const std::string& name, std::uint64_t offset, std::uint64_t length, double lease,
              double timeout) {
             LockOptions o{offset, length, millis(lease, "lease"), millis(timeout, "timeout")};
             py::gil_scoped_release nogil;
             return c.lock(name, o);
           })
      .def("barrier",
           [](Client& c, const std::string& name, std::uint32_t parties, double timeout) {
             const auto limit = millis(timeout, "timeout");
             py::gil_scoped_release nogil;
             c.barrier(name, parties, limit);
           })
      .def("status",
           [](Client& c) {
             py::gil_scoped_release nogil;
             return c.status();
           })
      .def("list",
           [](Client& c) {
             py::gil_scoped_release nogil;
             return c.list();
           })
      .def("info",
           [](Client& c, const std::string& name) {
             py::gil_scoped_release nogil;
             return c.info(name);
           })
      .def("repair",
           [](Client& c, const std::string& name) {
             py::gil_scoped_release nogil;
             return c.repair(name);
           })
      .def_property_readonly("servers", &Client::servers)
      .def("describe_paths", &Client::describe_paths)
      .def("unreachable_servers", &Client::unreachable_servers)
      .def(
          "replace_server",
          [](Client& c, const std::string& lost, const std::string& replacement) {
            py::gil_scoped_release nogil;
            return c.replace_server(lost, replacement);
          },
          py::arg("lost"), py::arg("replacement"))
      .def("replaced_servers", &Client::replaced_servers)
      .def("register_memory", [](Client& c, py::handle memory) {
        const auto mem = host_memory(memory, true);
        PyRegistration r;
        {
          py::gil_scoped_release nogil;
          r.registration = c.register_memory(writable_bytes_of(mem));
        }
        r.keep = mem.keep;
        return r;
      });
}

void bind_records(py::module_& m) {
  py::class_<RepairReport::Copy>(m, "RepairedCopy")
      .def_readonly("server", &RepairReport::Copy::server)
      .def_readonly("replica", &RepairReport::Copy::replica)
      .def_readonly("source", &RepairReport::Copy::source)
      .def_readonly("bytes", &RepairReport::Copy::bytes)
      .def_readonly("server_to_server", &RepairReport::Copy::server_to_server);
  py::class_<RepairReport>(m, "RepairReport")
      .def_readonly("name", &RepairReport::name)
      .def_readonly("repaired", &RepairReport::repaired)
      .def_readonly("unreachable", &RepairReport::unreachable)
      .def_readonly("records_restored", &RepairReport::records_restored)
      .def_readonly("bytes", &RepairReport::bytes)
      .def_readonly("recopied", &RepairReport::recopied)
      .def_readonly("clients_paused", &RepairReport::clients_paused)
      .def_readonly("paused_seconds", &RepairReport::paused_seconds)
      .def_readonly("seconds", &RepairReport::seconds);
  py::class_<CheckpointInfo>(m, "CheckpointInfo")
      .def_readonly("name", &CheckpointInfo::name)
      .def_readonly("size", &CheckpointInfo::size)
      .def_readonly("stripe_unit", &CheckpointInfo::stripe_unit)
      .def_readonly("version", &CheckpointInfo::version)
      .def_readonly("checksum", &CheckpointInfo::checksum)
      .def("__repr__", [](const CheckpointInfo& i) {
        return "CheckpointInfo(name='" + i.name + "', size=" + std::to_string(i.size) + ", version=" +
               std::to_string(i.version) + ")";
      });
  m.def("read_checkpoint", [](const std::string& path) {
    py::gil_scoped_release nogil;
    return read_checkpoint(path);
  }, "Verifies a checkpoint file whole and returns what it holds.");
  m.def(
      "make_credential",
      [](const std::string& secret_file, const std::string& prefix, double lifetime_s) {
        return make_credential(secret_file, prefix, std::chrono::seconds(static_cast<std::int64_t>(lifetime_s)));
      },
      "The text of a credential file for one name prefix, derived from the shared secret in secret_file.");
  py::class_<Layout>(m, "Layout")
      .def_readonly("name", &Layout::name)
      .def_readonly("size", &Layout::size)
      .def_readonly("stripe_unit", &Layout::stripe_unit)
      .def_readonly("servers", &Layout::servers)
      .def_readonly("shares", &Layout::shares)
      .def_readonly("instances", &Layout::instances)
      .def_readonly("replicas", &Layout::replicas)
      .def_property_readonly(
          "stale",
          [](const Layout& l) {
            std::vector<std::pair<std::uint32_t, std::uint32_t>> out;
            for (const auto& c : l.stale) out.emplace_back(c.replica, c.server);
            return out;
          },
          "Copies that fell behind the others, as (copy, server index) pairs: unused until smbctl repair rebuilds them.")
      .def("__repr__", [](const Layout& l) {
        return "Layout(name='" + l.name + "', size=" + std::to_string(l.size) + ", servers=" +
               std::to_string(l.servers.size()) + ")";
      });
  py::class_<BufferSummary>(m, "BufferSummary")
      .def_readonly("name", &BufferSummary::name)
      .def_readonly("bytes", &BufferSummary::bytes)
      .def_readonly("open_handles", &BufferSummary::open_handles);
  py::class_<ServerActivity>(m, "ServerActivity")
      .def_readonly("requests", &ServerActivity::requests)
      .def_readonly("errors", &ServerActivity::errors)
      .def_readonly("vector_ops", &ServerActivity::vector_ops)
      .def_readonly("vector_bytes", &ServerActivity::vector_bytes)
      .def_readonly("transport_bytes_written", &ServerActivity::transport_bytes_written)
      .def_readonly("transport_bytes_read", &ServerActivity::transport_bytes_read);
  py::class_<ServerWaits>(m, "ServerWaits")
      .def_readonly("versions", &ServerWaits::versions)
      .def_readonly("barrier_parties", &ServerWaits::barrier_parties)
      .def_readonly("locks", &ServerWaits::locks);
  py::class_<ServerStatus>(m, "ServerStatus")
      .def_readonly("address", &ServerStatus::address)
      .def_readonly("reachable", &ServerStatus::reachable)
      .def_readonly("error", &ServerStatus::error)
      .def_readonly("instance", &ServerStatus::instance)
      .def_readonly("transport", &ServerStatus::transport)
      .def_readonly("capacity", &ServerStatus::capacity)
      .def_readonly("used", &ServerStatus::used)
      .def_readonly("largest_free", &ServerStatus::largest_free)
      .def_readonly("huge_pages", &ServerStatus::huge_pages)
      .def_readonly("populated", &ServerStatus::populated)
      .def_readonly("clients", &ServerStatus::clients)
      .def_readonly("buffers", &ServerStatus::buffers)
      .def_readonly("activity", &ServerStatus::activity)
      .def_readonly("waiting", &ServerStatus::waiting);
}

}  // namespace

void bind_client_api(py::module_& m) {
  bind_records(m);
  bind_buffer(m);
  bind_client(m);
  m.def(
      "memory_address",
      [](py::handle object) {
        const auto mem = host_memory(object, false, /*allow_device=*/true);
        return reinterpret_cast<std::uintptr_t>(mem.data);
      },
      "The address smb reads `object`'s bytes from: equal to the object's own data pointer, as no copy is made.");
  m.def("memory_dtype", [](py::handle object) -> py::object {
    const auto mem = host_memory(object, false, /*allow_device=*/true);
    if (!mem.dtype) return py::none();
    return py::str(dtype_name(*mem.dtype));
  }, "The smb dtype name of `object`'s elements, or None.");
}

}  // namespace smb::python
