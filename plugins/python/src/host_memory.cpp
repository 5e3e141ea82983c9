#include "host_memory.hpp"

#include <smb/error.hpp>

#include <dlpack/dlpack.h>

#include <string>

namespace py = pybind11;

namespace smb::python {
namespace {

[[noreturn]] void refuse(const std::string& why) { throw Error(Errc::invalid_argument, why); }

std::string type_name(py::handle object) { return py::str(py::type::handle_of(object).attr("__name__")); }

// The struct-module format of a buffer as an smb element type.
std::optional<DType> dtype_of_format(const char* format, std::size_t itemsize) {
  if (format == nullptr) return DType::u8;  // plain bytes
  std::string f(format);
  if (!f.empty() && (f[0] == '<' || f[0] == '=' || f[0] == '@')) f.erase(0, 1);
  if (f == "f" && itemsize == 4) return DType::f32;
  if (f == "d" && itemsize == 8) return DType::f64;
  if (f == "e" && itemsize == 2) return DType::f16;
  if ((f == "B" || f == "c" || f == "?") && itemsize == 1) return DType::u8;
  if (f == "b" && itemsize == 1) return DType::i8;
  if ((f == "h" || f == "i" || f == "l" || f == "q") && itemsize == 2) return DType::i16;
  if ((f == "h" || f == "i" || f == "l" || f == "q") && itemsize == 4) return DType::i32;
  if ((f == "h" || f == "i" || f == "l" || f == "q") && itemsize == 8) return DType::i64;
  return std::nullopt;
}

std::optional<DType> dtype_of(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  switch (t.code) {
    case kDLFloat:
      if (t.bits == 32) return DType::f32;
      if (t.bits == 64) return DType::f64;
      if (t.bits == 16) return DType::f16;
      return std::nullopt;
    case kDLBfloat: return t.bits == 16 ? std::optional(DType::bf16) : std::nullopt;
    case kDLUInt: return t.bits == 8 ? std::optional(DType::u8) : std::nullopt;
    case kDLInt:
      if (t.bits == 8) return DType::i8;
      if (t.bits == 16) return DType::i16;
      if (t.bits == 32) return DType::i32;
      if (t.bits == 64) return DType::i64;
      return std::nullopt;
    default: return std::nullopt;
  }
}

// Releases the view with the GIL held, from whichever thread drops it last.
std::shared_ptr<void> keep_view(Py_buffer* view) {
  return std::shared_ptr<void>(view, [](void* p) {
    py::gil_scoped_acquire gil;
    auto* v = static_cast<Py_buffer*>(p);
    PyBuffer_Release(v);
    delete v;
  });
}

std::optional<HostMemory> from_buffer_protocol(py::handle object, bool writable) {
  if (!PyObject_CheckBuffer(object.ptr())) return std::nullopt;
  auto view = std::make_unique<Py_buffer>();
  const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(object.ptr(), view.get(), flags) != 0) {
    py::error_already_set e;  // BufferError: not contiguous, or read-only
    refuse("a " + type_name(object) + " whose memory cannot be used in place: " + std::string(py::str(e.value())) +
           (writable ? " (reads need writable, C-contiguous memory)" : " (use a C-contiguous array)"));
  }
  HostMemory m;
  m.data = static_cast<std::byte*>(view->buf);
  m.size = static_cast<std::size_t>(view->len);
  m.itemsize = static_cast<std::size_t>(view->itemsize);
  m.dtype = dtype_of_format(view->format, m.itemsize);
  m.keep = keep_view(view.release());
  return m;
}

bool row_major(const DLTensor& t) {
  if (t.strides == nullptr) return true;
  std::int64_t expected = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

std::optional<HostMemory> from_dlpack(py::handle object, bool allow_device) {
  if (!py::hasattr(object, "__dlpack__")) return std::nullopt;
  // torch refuses to export some tensors (requires_grad, bool) with a bare
  // RuntimeError; say it the way every other unusable object is refused
  // (smb.InvalidArgument, naming the type), with torch's reason and hint.
  py::object capsule;
  try {
    capsule = object.attr("__dlpack__")();
  } catch (py::error_already_set& e) {
    refuse("a " + type_name(object) + " whose memory cannot be used in place: " + std::string(py::str(e.value())));
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr) throw py::error_already_set();
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");  // ours now: we call its deleter
  std::shared_ptr<void> keep(managed, [](void* p) {
    py::gil_scoped_acquire gil;
    auto* m = static_cast<DLManagedTensor*>(p);
    if (m->deleter != nullptr) m->deleter(m);
  });
  const DLTensor& t = managed->dl_tensor;
  HostMemory m;
  if (t.device.device_type == kDLCUDA && allow_device) {
    m.kind = MemoryKind::cuda;
    m.device = t.device.device_id;
  } else if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost) {
    refuse("a " + type_name(object) + " in device memory (DLPack device type " +
           std::to_string(t.device.device_type) + "): copy it to host memory first (smb.torch stages CUDA tensors)");
  }
  if (!row_major(t)) refuse("a non-contiguous " + type_name(object) + ": call .contiguous() first");
  if (t.dtype.lanes != 1 || t.dtype.bits % 8 != 0) refuse("a " + type_name(object) + " of an element type smb cannot address");
  std::int64_t elements = 1;
  for (int i = 0; i < t.ndim; ++i) elements *= t.shape[i];
  m.itemsize = t.dtype.bits / 8;
  m.size = static_cast<std::size_t>(elements) * m.itemsize;
  m.data = static_cast<std::byte*>(t.data) + t.byte_offset;
  m.dtype = dtype_of(t.dtype);
  m.keep = std::move(keep);
  return m;
}

}  // namespace

HostMemory host_memory(py::handle object, bool writable, bool allow_device) {
  if (auto m = from_buffer_protocol(object, writable)) return *m;
  if (auto m = from_dlpack(object, allow_device)) return *m;
  refuse("a " + type_name(object) +
         " has neither the buffer protocol nor DLPack: pass bytes, bytearray, memoryview, a numpy array or a tensor");
}

}  // namespace smb::python
