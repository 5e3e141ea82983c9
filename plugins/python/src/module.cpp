// smb._core: libsmb for Python (see smb/__init__.py for the public API).
#include "bindings.hpp"
#include "errors.hpp"

#include <smb/config.h>

PYBIND11_MODULE(_core, m) {
  m.doc() = "libsmb bindings; use the smb package, not this module";
  smb::python::register_errors(m);
  smb::python::bind_client_api(m);
  smb::python::bind_engine(m);
  smb::python::bind_collective(m);
  m.attr("VERSION") = SMB_VERSION_STRING;
  m.attr("TRANSPORTS") = SMB_TRANSPORTS;  // comma separated, as smb/config.h has it
}
