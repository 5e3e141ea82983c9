#pragma once
// The parts of smb._core, one file each (module.cpp puts them together).
#include <pybind11/pybind11.h>

namespace smb::python {

void bind_client_api(pybind11::module_& m);  // client_bindings.cpp
void bind_engine(pybind11::module_& m);      // engine_bindings.cpp
void bind_collective(pybind11::module_& m);  // collective_bindings.cpp

}  // namespace smb::python
