"""Torch tensors to and from smb.collective.data (the framework-neutral
collectives): a contiguous CPU tensor's bytes are viewed as a NumPy uint8
array, in place; a CUDA tensor is staged through host memory. Scaling
(prescale, postscale, Average) happens here, in torch's types, as Horovod
scales.
"""

import contextlib
import threading

import numpy as np
import torch

from smb.collective import data

from smb.collective.data import CollectiveError  # noqa: F401 - for callers


_DTYPE_NAMES = {}


def dtype_name(dtype):
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


def as_bytes(t):
    """A contiguous CPU tensor's bytes, as a flat uint8 view (no copy)."""
    return t.reshape(-1).view(torch.uint8)


def to_host(tensor):
    """The tensor's data as a contiguous CPU tensor: itself when it is one
    already (no copy), else a copy (from a GPU: through pinned memory)."""
    t = tensor.detach()
    if t.device.type != "cpu":
        staged = torch.empty(t.shape, dtype=t.dtype, pin_memory=torch.cuda.is_available())
        staged.copy_(t)
        return staged
    return t.contiguous()


class _BufferPool:
    """Host buffers kept from one collective to the next, as Horovod keeps
    its fusion buffer. A fresh buffer of tens of MB is fresh pages from the
    kernel every time (glibc maps allocations over 32 MB anew): gathering
    resnet18's 45 MB of gradients that way took 62-74 ms against 29-41 ms
    with a kept buffer (the exchange in place: 21-25 ms; docs/benchmarks.md,
    "On a GPU"). Page-locked where a GPU is (pinned=True), so that a CUDA tensor
    crosses at the bus's speed in one copy each way. A buffer is lent to one
    collective at a time; the pool keeps the `keep` most recently returned."""

    def __init__(self, keep=8):  # keep >= 1
        self._keep = keep
        self._free = []  # uint8 tensors, the most recently returned last
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def borrow(self, dtype, numel, pinned):
        nbytes = numel * torch.empty(0, dtype=dtype).element_size()
        with self._lock:
            fits = [i for i, b in enumerate(self._free) if b.numel() >= nbytes and b.is_pinned() == pinned]
            # (by position: list.remove would compare tensors element by element)
            raw = self._free.pop(min(fits, key=lambda i: self._free[i].numel())) if fits else None
        if raw is None:
            raw = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
        try:
            yield raw[:nbytes].view(dtype)
        finally:
            with self._lock:
                self._free.append(raw)
                del self._free[:-self._keep]


_pool = _BufferPool()


def fusion_buffer(dtype, numel, pinned=False):
    """A context: a flat CPU tensor of `numel` elements on loan from the pool
    (its contents undefined)."""
    return _pool.borrow(dtype, numel, pinned)


_NUMPY_TYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16,
                torch.uint8: np.uint8, torch.int8: np.int8, torch.int16: np.int16, torch.int32: np.int32,
                torch.int64: np.int64, torch.bool: np.bool_}


def _view(host, device):
    # Through NumPy where it has the type: one torch call, not three (each
    # costs microseconds, as much as a small collective's own work).
    raw = host.numpy().reshape(-1).view(np.uint8) if host.dtype in _NUMPY_TYPES else as_bytes(host).numpy()
    return data.Tensor(raw, dtype_name(host.dtype), host.shape, host.element_size(),
                       "GPU" if device.type == "cuda" else "CPU")


def _tensor(raw, dtype, shape):
    """Bytes from data.* as a tensor of `dtype` and `shape` (no copy)."""
    if raw.size == 0:  # (an empty array's stride cannot be viewed as another type)
        return torch.empty(shape, dtype=dtype)
    if dtype in _NUMPY_TYPES:
        return torch.from_numpy(raw.view(_NUMPY_TYPES[dtype]).reshape(shape))
    return torch.from_numpy(raw).view(dtype).reshape(shape)


def _scaled(t, factor):
    """t * factor as Horovod scales: in float64 for integers and float64
    (truncated toward zero for integers), in float32 for the halves and float32."""
    if factor == 1.0:
        return t
    if t.is_floating_point():
        if t.dtype == torch.float64:
            return t * factor
        return (t.float() * factor).to(t.dtype)
    return (t.double() * factor).trunc().to(t.dtype)


# What a reduction over the live ranks becomes when joined ranks add zeros.
# (minimum/maximum: clamp has no float16 kernel on the CPU.)
_JOINED_ZERO = {"min": lambda t: torch.minimum(t, torch.zeros_like(t)),
                "max": lambda t: torch.maximum(t, torch.zeros_like(t)), "product": torch.zeros_like}


def _scale_(t, factor):
    """_scaled(t, factor) into t itself: in place for float32 and float64
    (the same bits: one multiply in the tensor's own type)."""
    if factor == 1.0:
        return t
    if t.dtype in (torch.float32, torch.float64):
        return t.mul_(factor)
    return t.copy_(_scaled(t, factor))


def allreduce(group, name, tensor, red, prescale, postscale, out=None, device=None):
    """Sum (or average, min, max, product) over the set: a new CPU tensor,
    or `out` where given (a contiguous CPU tensor of the same dtype and
    shape, which may be `tensor` itself: an in-place allreduce then copies
    nothing and allocates nothing). `device`: the device the ranks compare
    (default: the tensor's), for a tensor staged on the host."""
    host = _scaled(to_host(tensor), prescale)
    into = as_bytes(out).numpy() if out is not None and host.numel() else None
    raw, joined = data.allreduce(group, name, _view(host, device or tensor.device), red, prescale, postscale, into)
    if host.numel() == 0:
        return host.clone() if out is None else out
    if out is not None:
        return finish_(out, joined, red, final_factor(group, red, postscale))
    return allreduce_result(group, raw, host.dtype, host.shape, joined, red, postscale)


def final_factor(group, red, postscale):
    """What an allreduce's sum is scaled by at the end."""
    return postscale / group.size if red == "average" else postscale


def finish_(out, joined, red, factor):
    """An allreduce's result in `out` made final in place: ranks that joined
    counted as zeros, then scaled by `factor` (final_factor())."""
    if joined and red in _JOINED_ZERO:
        out.copy_(_JOINED_ZERO[red](out))
    return _scale_(out, factor)


def allreduce_result(group, raw, dtype, shape, joined, red, postscale):
    """A new tensor from an allreduce's result bytes: joined ranks counted
    as zeros, then scaled (postscale, and 1/size for an average)."""
    result = _tensor(raw, dtype, shape)
    if joined and red in _JOINED_ZERO:
        result = _JOINED_ZERO[red](result)
    return _scaled(result, final_factor(group, red, postscale))


def ready_event(tensor):
    """For a CUDA tensor, an event recorded now on the current stream (the
    one its producer, say backward, queued its work on), else None: what
    its exchange waits for instead of everything queued before it starts."""
    if tensor.device.type != "cuda":
        return None
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(tensor.device))
    return event


_side_streams = {}
_side_lock = threading.Lock()


@contextlib.contextmanager
def side_stream(device, ready):
    """For work on a CUDA device: runs the block on a stream of the
    exchange's own that first waits for `ready` (ready_event(); None: for
    the device's default stream), and waits for that stream on leaving, so
    that results are in place on return. Backward goes on meanwhile: a copy
    on the legacy default stream would wait for every kernel queued so far,
    the later layers' too (DDP and Horovod copy on a side stream likewise).
    A no-op on the CPU."""
    if device.type != "cuda":
        yield
        return
    with _side_lock:
        stream = _side_streams.get(device)
        if stream is None:
            stream = _side_streams[device] = torch.cuda.Stream(device)
    if ready is not None:
        stream.wait_event(ready)
    else:
        stream.wait_stream(torch.cuda.default_stream(device))
    with torch.cuda.stream(stream):
        try:
            yield
        finally:
            stream.synchronize()


def allreduce_(group, name, tensor, red, prescale, postscale):
    """allreduce() into `tensor` itself, a contiguous tensor on any device: a
    CPU tensor in its own memory; a device tensor through a page-locked
    buffer of the pool, one copy each way on the current stream (inside
    side_stream() for CUDA tensors), the result there on return."""
    if tensor.device.type == "cpu":
        return allreduce(group, name, tensor, red, prescale, postscale, out=tensor)
    stream = torch.cuda.current_stream(tensor.device)
    with fusion_buffer(tensor.dtype, tensor.numel(), pinned=True) as staged:
        staged.copy_(tensor.reshape(-1), non_blocking=True)
        stream.synchronize()  # (the host reads staged next)
        allreduce(group, name, staged, red, prescale, postscale, out=staged, device=tensor.device)
        tensor.reshape(-1).copy_(staged, non_blocking=True)
        stream.synchronize()  # (staged goes back to the pool)
    return tensor


def reducescatter(group, name, tensor, red, prescale, postscale):
    """This rank's rows of the reduction (data.scatter_rows)."""
    host = _scaled(to_host(tensor), prescale)
    raw, rows = data.reducescatter(group, name, _view(host, tensor.device), red, prescale, postscale)
    out = _tensor(raw, host.dtype, (rows,) + tuple(host.shape[1:]))
    return _scaled(out, postscale / group.size if red == "average" else postscale)


def allgather(group, name, tensor):
    """Concatenation along dimension 0 in set rank order (first dimensions may differ)."""
    host = to_host(tensor)
    raw, shape = data.allgather(group, name, _view(host, tensor.device))
    return _tensor(raw, host.dtype, shape)


def broadcast(group, name, tensor, root_rank):
    """The root's tensor on every rank (a new CPU tensor, the root's too)."""
    host = to_host(tensor)
    raw = data.broadcast(group, name, _view(host, tensor.device), root_rank)
    if raw is None:
        # to_host() of a contiguous CPU tensor is a view of it: the root's
        # result must be a tensor of its own, as on the others.
        return host.clone() if host.data_ptr() == tensor.data_ptr() else host
    return _tensor(raw, host.dtype, host.shape)


def alltoall(group, name, tensor, splits):
    """Rows splits[i] go to set rank i; what this rank received and from whom."""
    host = to_host(tensor)
    raw, received, shape = data.alltoall(group, name, _view(host, tensor.device), splits)
    return _tensor(raw, host.dtype, shape), received


def barrier(group):
    data.barrier(group)
