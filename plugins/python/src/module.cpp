// smb._core: libsmb for Python (see smb/__init__.py for the public API).
#include "bindings.hpp"
#include "errors.hpp"

PYBIND11_MODULE(_core, m) {
  m.doc() = "libsmb bindings; use the smb package, not this module";
  smb::python::register_errors(m);
  smb::python::bind_client_api(m);
  smb::python::bind_engine(m);
}
