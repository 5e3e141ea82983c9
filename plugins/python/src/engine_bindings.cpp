// smb._core.UpdateEngine: the C++ engine (include/smb/update_engine.hpp) over
// float32 parameter vectors held by any buffer-protocol or DLPack object
// (numpy arrays, CPU tensors; CUDA tensors where the engine runs on a GPU).
#include "bindings.hpp"
#include "host_memory.hpp"

#include <smb/update_engine.hpp>

#include <pybind11/stl.h>

#include <memory>

namespace py = pybind11;

namespace smb::python {
namespace {

UpdateMode mode_named(const std::string& mode) {
  if (mode == "seasgd") return UpdateMode::seasgd;
  if (mode == "downpour") return UpdateMode::downpour;
  if (mode == "sync" || mode == "synchronous") return UpdateMode::synchronous;
  throw Error(Errc::invalid_argument, "unknown update mode '" + mode + "': seasgd, downpour or sync");
}

// The engine and the Python client it uses (kept alive as long as it is).
struct PyEngine {
  py::object client;
  std::unique_ptr<UpdateEngine> engine;
  std::uint64_t parameters = 0;
  bool on_device = false;

  // `vector` as the engine's float span: float32, exactly `parameters` long,
  // on the engine's side (host memory also where `host_too`).
  std::span<float> floats(const HostMemory& mem, const char* what, bool host_too) const {
    if (mem.dtype != DType::f32)
      throw Error(Errc::invalid_argument, std::string("UpdateEngine.") + what + ": float32 elements expected");
    if (mem.size != parameters * sizeof(float))
      throw Error(Errc::invalid_argument, std::string("UpdateEngine.") + what + ": " +
                                              std::to_string(mem.size / sizeof(float)) + " floats for an engine of " +
                                              std::to_string(parameters));
    if ((mem.kind == MemoryKind::cuda) != on_device && !(host_too && mem.kind != MemoryKind::cuda))
      throw Error(Errc::invalid_argument, std::string("UpdateEngine.") + what +
                                              (on_device ? ": the engine runs on a GPU; pass device memory "
                                                           "(global_weights also takes host memory)"
                                                         : ": the engine runs on the host; pass host memory"));
    return {reinterpret_cast<float*>(mem.data), parameters};
  }
};

template <class F>
void call(PyEngine& e, py::handle vector, bool writable, const char* what, F f, bool host_too = false) {
  const auto mem = host_memory(vector, writable, e.on_device);  // held across the call
  auto span = e.floats(mem, what, host_too);
  py::gil_scoped_release nogil;
  f(*e.engine, span);
}

}  // namespace

void bind_engine(py::module_& m) {
  py::class_<PyEngine>(m, "UpdateEngine")
      .def(py::init([](py::object client, std::string name, std::uint64_t parameters, std::uint32_t groups,
                       std::uint32_t group, std::uint32_t group_size, std::uint32_t group_rank, std::string mode,
                       double alpha, std::uint32_t tau, double timeout, int cuda_device,
                       std::vector<std::string> group_servers, std::string resume_from,
                       std::string group_transport) {
             EngineConfig config;
             config.name = std::move(name);
             config.parameters = parameters;
             config.groups = groups;
             config.group = group;
             config.group_size = group_size;
             config.group_rank = group_rank;
             config.mode = mode_named(mode);
             config.alpha = alpha;
             config.tau = tau;
             config.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout * 1000.0));
             config.cuda_device = cuda_device;
             config.group_servers = std::move(group_servers);
             config.group_transport = std::move(group_transport);
             config.resume_from = std::move(resume_from);
             auto e = std::make_unique<PyEngine>();
             e->client = client;
             e->parameters = parameters;
             e->on_device = cuda_device >= 0;
             auto& c = client.cast<Client&>();
             py::gil_scoped_release nogil;
             e->engine = std::make_unique<UpdateEngine>(c, config);
             return e;
           }),
           py::arg("client"), py::arg("name"), py::arg("parameters"), py::arg("groups"), py::arg("group"),
           py::arg("group_size"), py::arg("group_rank"), py::arg("mode"), py::arg("alpha"), py::arg("tau"),
           py::arg("timeout"), py::arg("cuda_device"), py::arg("group_servers") = std::vector<std::string>{},
           py::arg("resume_from") = std::string(), py::arg("group_transport") = std::string())
      .def("initialize", [](PyEngine& e, py::handle params) {
        call(e, params, true, "initialize", [](UpdateEngine& u, std::span<float> s) { u.initialize(s); });
      })
      .def("allreduce", [](PyEngine& e, py::handle grads) {
        call(e, grads, true, "allreduce", [](UpdateEngine& u, std::span<float> s) { u.allreduce(s); });
      })
      .def("after_step", [](PyEngine& e, py::handle params) {
        call(e, params, true, "after_step", [](UpdateEngine& u, std::span<float> s) { u.after_step(s); });
      })
      .def("global_weights", [](PyEngine& e, py::handle out) {
        call(
            e, out, true, "global_weights", [](UpdateEngine& u, std::span<float> s) { u.global_weights(s); }, true);
      })
      .def("save_checkpoint", [](PyEngine& e, const std::string& path) {
        py::gil_scoped_release nogil;
        return e.engine->save_checkpoint(path);
      });
}

}  // namespace smb::python
