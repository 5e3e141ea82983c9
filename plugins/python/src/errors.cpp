#include "errors.hpp"

#include <smb/error.hpp>

namespace py = pybind11;

namespace smb::python {
namespace {

// The Errc's identifier, as smb/errors.py names codes.
const char* code_name(Errc code) {
  switch (code) {
    case Errc::ok: return "ok";
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::out_of_range: return "out_of_range";
    case Errc::not_found: return "not_found";
    case Errc::already_exists: return "already_exists";
    case Errc::no_space: return "no_space";
    case Errc::unreachable: return "unreachable";
    case Errc::server_gone: return "server_gone";
    case Errc::timeout: return "timeout";
    case Errc::protocol: return "protocol";
    case Errc::transport: return "transport";
    case Errc::internal: return "internal";
    case Errc::data_lost: return "data_lost";
    case Errc::permission_denied: return "permission_denied";
    case Errc::busy: return "busy";
    case Errc::out_of_order: return "out_of_order";
  }
  return "internal";
}

}  // namespace

void register_errors(py::module_& m) {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      py::object error = py::module_::import("smb.errors").attr("from_code")(code_name(e.code()), e.what());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
    }
  });
  m.def("code_names", [] {
    py::list names;
    for (int c = 0; c <= static_cast<int>(kLastErrc); ++c) names.append(code_name(static_cast<Errc>(c)));
    return names;
  }, "Every Errc name, in code order (for smb.errors' tests).");
}

}  // namespace smb::python
