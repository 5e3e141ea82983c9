#pragma once
// The bytes inside a Python object, without copying them: anything with
// the buffer protocol (bytes, bytearray, memoryview, numpy arrays) or with
// DLPack (torch tensors, and numpy again). `keep` holds what keeps the
// memory valid -- the Py_buffer view, or the DLPack managed tensor -- and
// releases it (taking the GIL) when the last copy goes, so an asynchronous
// transfer can hold it until it completes.
#include <smb/vector_ops.hpp>

#include <pybind11/pybind11.h>

#include <cstddef>
#include <memory>
#include <optional>

namespace smb::python {

enum class MemoryKind { host, cuda };

struct HostMemory {
  std::byte* data = nullptr;
  std::size_t size = 0;                // bytes
  std::optional<DType> dtype;          // where the object says and smb has the type
  std::size_t itemsize = 1;
  MemoryKind kind = MemoryKind::host;
  int device = -1;                     // CUDA device of kind == cuda
  std::shared_ptr<void> keep;
};

// Throws smb::Error(invalid_argument) naming what is wrong: no buffer
// protocol or DLPack, not contiguous, read-only where `writable`, or device
// memory where `allow_device` is false.
HostMemory host_memory(pybind11::handle object, bool writable, bool allow_device = false);

}  // namespace smb::python
