"""Torch tensors to and from smb.collective.data (the framework-neutral
collectives): a contiguous CPU tensor's bytes are viewed as a NumPy uint8
array, in place; a CUDA tensor is staged through host memory. Scaling
(prescale, postscale, Average) happens here, in torch's types, as Horovod
scales.
"""

import torch

from smb.collective import data

from smb.collective.data import CollectiveError  # noqa: F401 - for callers


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


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


def _view(host, device):
    return data.Tensor(as_bytes(host).numpy(), dtype_name(host.dtype), host.shape, host.element_size(),
                       "GPU" if device.type == "cuda" else "CPU")


def _tensor(raw, dtype, shape):
    """Bytes from data.* as a tensor of `dtype` and `shape` (no copy)."""
    if raw.size == 0:  # (an empty array's stride cannot be viewed as another type)
        return torch.empty(shape, dtype=dtype)
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


def allreduce(group, name, tensor, red, prescale, postscale, out=None):
    """Sum (or average, min, max, product) over the set: a new CPU tensor,
    or `out` where given (a contiguous CPU tensor of the same dtype and
    shape, which may be `tensor` itself: an in-place allreduce then copies
    nothing and allocates nothing)."""
    host = _scaled(to_host(tensor), prescale)
    into = as_bytes(out).numpy() if out is not None and host.numel() else None
    raw, joined = data.allreduce(group, name, _view(host, tensor.device), red, prescale, postscale, into)
    if host.numel() == 0:
        return host.clone() if out is None else out
    factor = postscale / group.size if red == "average" else postscale
    if out is not None:
        if joined and red in _JOINED_ZERO:
            out.copy_(_JOINED_ZERO[red](out))
        return _scale_(out, factor)
    result = _tensor(raw, host.dtype, host.shape)
    if joined and red in _JOINED_ZERO:
        result = _JOINED_ZERO[red](result)
    return _scaled(result, factor)


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
