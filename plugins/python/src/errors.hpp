#pragma once
// smb::Error becomes the Python exception of its code (smb/errors.py): a
// subclass of smb.Error with .code set to the Errc's name, message unchanged.
#include <pybind11/pybind11.h>

namespace smb::python {

void register_errors(pybind11::module_& m);

}  // namespace smb::python
