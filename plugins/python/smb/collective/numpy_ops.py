"""Horovod-style collectives on NumPy arrays, through the fabric: the
framework-neutral API under smb.tensorflow (and usable on its own).

    from smb.collective import basics, numpy_ops as hvd
    basics.init()
    total = hvd.allreduce(np.ones(4, np.float32), op="sum")

Ops are "average" (the default), "sum", "min", "max" and "product". Arrays
are read in place (their bytes go straight into the fabric); results are
new arrays. Every call has an *_async form returning a handle for
poll / synchronize (smb.collective.handles). Scaling follows Horovod:
integers are scaled in float64 and truncated toward zero, float16 and
float32 in float32.
"""

import io
import pickle

import numpy as np

from . import data
from .handles import next_handle, poll, submit, synchronize  # noqa: F401 - re-exported
from .process_sets import global_process_set

OPS = ("average", "sum", "min", "max", "product")


def _view(array):
    a = np.ascontiguousarray(array)
    return data.Tensor(a.reshape(-1).view(np.uint8), a.dtype.name, a.shape, a.dtype.itemsize), a


def _array(raw, dtype, shape):
    return raw.view(dtype).reshape(shape)


def scaled(a, factor):
    """a * factor as Horovod scales (see the module's documentation)."""
    if factor == 1.0:
        return a
    if np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_:
        return np.trunc(a.astype(np.float64) * factor).astype(a.dtype)
    if a.dtype == np.float64:
        return a * factor
    return (a.astype(np.float32) * np.float32(factor)).astype(a.dtype)


_JOINED_ZERO = {"min": lambda a: np.minimum(a, 0).astype(a.dtype), "max": lambda a: np.maximum(a, 0).astype(a.dtype),
                "product": np.zeros_like}


def _check_op(op):
    if op not in OPS:
        raise ValueError(f"unknown reduction op {op!r}: {', '.join(OPS)}")


def allreduce_async(array, op="average", name=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    _check_op(op)
    handle = next_handle()

    def work(group, full):
        t, a = _view(scaled(np.asarray(array), prescale_factor))
        raw, joined = data.allreduce(group, full, t, op, float(prescale_factor), float(postscale_factor))
        out = _array(raw, a.dtype, a.shape) if a.size else a.copy()
        if joined and op in _JOINED_ZERO:
            out = _JOINED_ZERO[op](out)
        return scaled(out, postscale_factor / group.size if op == "average" else postscale_factor)

    return submit(handle, process_set, "Allreduce", "allreduce", name, work)


def allreduce(array, op="average", name=None, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set):
    """The reduction of `array` over the set, as a new array."""
    return synchronize(allreduce_async(array, op, name, prescale_factor, postscale_factor, process_set))


def allgather_async(array, name=None, process_set=global_process_set):
    handle = next_handle()

    def work(group, full):
        t, a = _view(array)
        raw, shape = data.allgather(group, full, t)
        return _array(raw, a.dtype, shape)

    return submit(handle, process_set, "Allgather", "allgather", name, work)


def allgather(array, name=None, process_set=global_process_set):
    """Concatenation over the set along axis 0 (first dimensions may differ)."""
    return synchronize(allgather_async(array, name, process_set))


def broadcast_async(array, root_rank, name=None, process_set=global_process_set):
    handle = next_handle()

    def work(group, full):
        t, a = _view(array)
        raw = data.broadcast(group, full, t, root_rank)
        return np.array(a, copy=True) if raw is None else _array(raw, a.dtype, a.shape)

    return submit(handle, process_set, "Broadcast", "broadcast", name, work)


def broadcast(array, root_rank, name=None, process_set=global_process_set):
    """The root's `array` on every rank (a new array; root_rank is global)."""
    return synchronize(broadcast_async(array, root_rank, name, process_set))


def alltoall(array, splits=None, name=None, process_set=global_process_set):
    """Rows splits[i] go to set rank i (equal parts by default); returns the
    rows received, in source order, and how many came from each rank."""
    handle = next_handle()
    a = np.asarray(array)

    def work(group, full):
        parts = list(splits) if splits is not None else [a.shape[0] // group.size] * group.size
        if splits is None and a.shape[0] % group.size:
            raise ValueError("splits not provided, but first dimension of tensor is not an even multiple of the "
                             "number of workers.")
        t, c = _view(a)
        raw, received, shape = data.alltoall(group, full, t, parts)
        return _array(raw, c.dtype, shape), received

    return synchronize(submit(handle, process_set, "Alltoall", "alltoall", name, work))


def reducescatter(array, op="average", name=None, prescale_factor=1.0, postscale_factor=1.0,
                  process_set=global_process_set):
    """This rank's rows of the reduction (rank i of P: q+1 rows if i < n mod P, else q)."""
    if op not in ("average", "sum"):
        raise ValueError("Reducescatter currently only supports AVERAGE and SUM.")
    handle = next_handle()

    def work(group, full):
        t, a = _view(scaled(np.asarray(array), prescale_factor))
        raw, rows = data.reducescatter(group, full, t, op, float(prescale_factor), float(postscale_factor))
        out = _array(raw, a.dtype, (rows,) + a.shape[1:])
        return scaled(out, postscale_factor / group.size if op == "average" else postscale_factor)

    return synchronize(submit(handle, process_set, "Reducescatter", "reducescatter", name, work))


def barrier(process_set=global_process_set):
    """Returns once every rank of the set has called it."""
    from .process_sets import group_of
    next_handle()
    data.barrier(group_of(process_set, "Barrier"))


def join():
    """This rank is out of data: the others' allreduces count it as zeros
    until every rank has joined. Returns the last rank to join."""
    from . import basics, joining
    next_handle()
    return joining.join(basics.state())


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """The root's `obj` (pickled) on every rank; the root gets its own back."""
    from . import basics
    name = name or type(obj).__name__
    is_root = basics.rank() == root_rank
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8) if is_root else np.empty(0, np.uint8)
    size = broadcast(np.array([payload.size], dtype=np.int64), root_rank, name + ".sz", process_set)
    if not is_root:
        payload = np.empty(int(size[0]), dtype=np.uint8)
    received = broadcast(payload, root_rank, name + ".t", process_set)
    return obj if is_root else pickle.load(io.BytesIO(received.tobytes()))


def allgather_object(obj, name=None, process_set=global_process_set):
    """Every rank's `obj`, in rank order."""
    name = name or type(obj).__name__
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    sizes = allgather(np.array([payload.size], dtype=np.int64), name + ".sz", process_set)
    gathered = allgather(payload, name + ".t", process_set)
    out, at = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(gathered[at:at + n].tobytes()))
        at += n
    return out
