"""The collectives themselves, on torch tensors, through the fabric (fabric.py
has the arrival protocol; ops.py the Horovod API around these).

Bytes move as uint8 views of contiguous CPU tensors, in place (DLPack); a
CUDA tensor is staged through host memory. Reductions run on the memory
servers: the first participating rank copies its input into the result
region, the others wait for that and add (min, max, multiply) theirs, all
wait for the version that says every contribution is in, and read.

Each function takes the collective's full Horovod name ("allreduce.<name>",
made by ops.py): it names the collective in the fabric, and in stall
warnings and errors, as Horovod names it.
"""

import torch

from . import fabric
from .fabric import CollectiveError
from .timeline import phase

# Horovod's names for the ops in error messages.
_KIND = {"allreduce": "ALLREDUCE", "allgather": "ALLGATHER", "broadcast": "BROADCAST", "alltoall": "ALLTOALL",
         "reducescatter": "REDUCESCATTER", "barrier": "BARRIER"}


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


def device_of(tensor):
    return "GPU" if tensor.device.type == "cuda" else "CPU"


def _meta(kind, tensor, **extra):
    return dict(op=kind, dtype=dtype_name(tensor.dtype), shape=list(tensor.shape), device=device_of(tensor), **extra)


def check(kind, slots, joined=()):
    """Raises the same CollectiveError on every rank when the ranks' metadata
    disagree (Horovod's messages)."""
    live = [s for i, s in enumerate(slots) if i not in joined]
    if not live:
        return
    first = live[0]
    for s in live[1:]:
        if s["op"] != first["op"]:
            raise CollectiveError(f"Mismatched operations: One rank did an {_KIND.get(first['op'], first['op'])}, "
                                  f"but another rank did an {_KIND.get(s['op'], s['op'])}.")
        if s["dtype"] != first["dtype"]:
            raise CollectiveError(f"Mismatched data types: One rank had type {first['dtype']}, but another rank had "
                                  f"type {s['dtype']}.")
        if s.get("device") != first.get("device"):
            raise CollectiveError(f"Mismatched {_KIND[kind]} CPU/GPU device selection: One rank specified device "
                                  f"{first.get('device')}, but another rank specified device {s.get('device')}.")
    for s in live[1:]:
        if kind in ("allreduce", "broadcast", "reducescatter") and s["shape"] != first["shape"]:
            raise CollectiveError(f"Mismatched {_KIND[kind]} tensor shapes: One rank sent a tensor of shape "
                                  f"{first['shape']}, but another rank sent a tensor of shape {s['shape']}.")
        if kind in ("allgather", "alltoall"):
            if len(s["shape"]) != len(first["shape"]):
                raise CollectiveError(f"Mismatched {_KIND[kind]} tensor shapes: One rank sent a tensor of rank "
                                      f"{len(first['shape'])}, but another rank sent a tensor of rank "
                                      f"{len(s['shape'])}.")
            for d in range(1, len(s["shape"])):
                if s["shape"][d] != first["shape"][d]:
                    raise CollectiveError(f"Mismatched {_KIND[kind]} tensor shapes: One rank sent a tensor with "
                                          f"dimension {d} equal to {first['shape'][d]}, but another rank sent a "
                                          f"tensor with dimension {d} equal to {s['shape'][d]}.")
        if s.get("red") != first.get("red"):
            raise CollectiveError(f"Mismatched reduction operation: One rank requested {first.get('red')}, but "
                                  f"another rank requested {s.get('red')}.")
        if (s.get("pre"), s.get("post")) != (first.get("pre"), first.get("post")):
            raise CollectiveError("Mismatched prescale and/or postscale factors: One rank sent factors "
                                  f"{first.get('pre')}, {first.get('post')}, but another rank sent factors "
                                  f"{s.get('pre')}, {s.get('post')}.")
        if s.get("root") != first.get("root"):
            raise CollectiveError(f"Mismatched {_KIND[kind]} root ranks: One rank specified root rank "
                                  f"{first.get('root')}, but another rank specified root rank {s.get('root')}.")
    if kind == "allgather" and len(first["shape"]) == 0:
        raise CollectiveError("Process-set rank zero tried to ALLGATHER a rank-zero tensor.")


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

_SERVER_OP = {"sum": "accumulate", "average": "accumulate", "min": "min", "max": "max", "product": "product"}


def _reduction(c, host):
    """Before arriving: the reduction buffer this tensor will use."""
    dt = fabric.REDUCIBLE.get(dtype_name(host.dtype))
    if dt is None:
        raise ValueError(f"Tensor type {host.type()} is not supported.")
    return dt, c.reduction_buffer(dt, max(1, host.numel() * host.element_size()))


def _reduce_into(c, dt, entry, host, red, out_rows=None):
    """After arriving: the server-side reduction of `host` over the set's
    live ranks into a new tensor; with out_rows=(first, count) only those
    rows are read."""
    group = c.group
    entry.begin([i for i in range(group.size) if i not in c.joined])
    buf, striping = entry.buffer, entry.striping
    me = entry.participants.index(group.index)
    result = striping.offset(c.generation % 2)  # the region of two generations ago is free again
    mine = striping.offset(2 + group.index)
    count = host.numel()
    with phase("WRITE"):
        buf.write(mine, as_bytes(host))
    with phase("SERVER_OP"):
        if me == 0:
            buf.apply_from("copy", buf, dt, result, count, mine)
        else:
            c.wait_data(buf, entry.expected + 1, entry.participants[:1])
            buf.apply_from(_SERVER_OP[red], buf, dt, result, count, mine)
    with phase("WAIT"):
        c.wait_data(buf, entry.expected + len(entry.participants), entry.participants)
    entry.finish()
    first, rows = out_rows if out_rows is not None else (0, host.shape[0] if host.dim() else 1)
    out = torch.empty_like(host) if out_rows is None else torch.empty((rows,) + tuple(host.shape[1:]),
                                                                      dtype=host.dtype)
    row_bytes = (host[0].numel() if host.dim() > 0 else 1) * host.element_size()
    with phase("READ"):
        if out.numel():
            buf.read(result + first * row_bytes, as_bytes(out))
    return out


def allreduce(group, name, tensor, red, prescale, postscale):
    """Sum (or average, min, max, product) over the set; a new CPU tensor."""
    c = group.collective(name)
    host = _scaled(to_host(tensor), prescale)
    dt, entry = _reduction(c, host)
    slots = c.arrive(_meta("allreduce", tensor, red=red, pre=prescale, post=postscale))
    check("allreduce", slots, c.joined)
    if host.numel() == 0:
        return host.clone()
    out = _reduce_into(c, dt, entry, host, red)
    if c.joined and red in _JOINED_ZERO:
        # Joined ranks count as zeros (Horovod): nothing to add for a sum,
        # but min, max and product must see them too.
        out = _JOINED_ZERO[red](out)
    factor = postscale / group.size if red == "average" else postscale
    return _scaled(out, factor)


def reducescatter(group, name, tensor, red, prescale, postscale):
    """The reduction, each rank reading its rows only: rank i of P gets
    q+1 rows if i < n mod P, else q (q = n div P), in rank order."""
    c = group.collective(name)
    host = _scaled(to_host(tensor), prescale)
    dt, entry = _reduction(c, host)
    slots = c.arrive(_meta("reducescatter", tensor, red=red, pre=prescale, post=postscale))
    check("reducescatter", slots, c.joined)
    if c.joined:
        raise CollectiveError("Reducescatter is not supported with Join at this time.")
    q, r = divmod(host.shape[0], group.size)
    i = group.index
    first, rows = i * q + min(i, r), q + (1 if i < r else 0)
    if host.numel() == 0:
        return host.new_empty((rows,) + tuple(host.shape[1:]))
    out = _reduce_into(c, dt, entry, host, red, (first, rows))
    factor = postscale / group.size if red == "average" else postscale
    return _scaled(out, factor)


def _read_parts(c, slots, rows_of, row_bytes, out, offset_rows_of=None):
    """Reads every rank's part (in set order) into consecutive rows of `out`."""
    requests = []
    at = 0
    out_bytes = as_bytes(out)
    for i, s in enumerate(slots):
        rows = rows_of(i, s)
        if rows:
            part = c.peer_part(s["part"])
            src = (offset_rows_of(i, s) if offset_rows_of else 0) * row_bytes
            requests.append(part.read_async(src, out_bytes[at * row_bytes:(at + rows) * row_bytes]))
        at += rows
    with phase("READ"):
        for r in requests:
            r.wait()


def allgather(group, name, tensor):
    """Concatenation along dimension 0 in set rank order (first dimensions may differ)."""
    c = group.collective(name)
    host = to_host(tensor)
    part_name = c.write_part(as_bytes(host))
    slots = c.arrive(_meta("allgather", tensor, part=part_name))
    if c.joined:  # (before check(): a joined rank's slot is empty)
        raise CollectiveError("Allgather is not supported with Join at this time. Specify sparse_to_dense=True if "
                              "using DistributedOptimizer")
    check("allgather", slots)
    shape = slots[0]["shape"]
    row_elems = 1
    for d in shape[1:]:
        row_elems *= d
    total = sum(s["shape"][0] for s in slots)
    out = torch.empty([total] + shape[1:], dtype=host.dtype)
    _read_parts(c, slots, lambda i, s: s["shape"][0], row_elems * host.element_size(), out)
    return out


def broadcast(group, name, tensor, root_rank):
    """The root's tensor on every rank (a new CPU tensor)."""
    c = group.collective(name)
    host = to_host(tensor)
    me_root = group.runtime.rank == root_rank
    part_name = c.write_part(as_bytes(host)) if me_root else None
    slots = c.arrive(_meta("broadcast", tensor, root=root_rank, part=part_name))
    if c.joined:  # (before check(): a joined rank's slot is empty)
        raise CollectiveError("Broadcast is not supported with Join at this time.")
    check("broadcast", slots)
    if me_root:
        # to_host() of a contiguous CPU tensor is a view of it (never `is` it):
        # the root's result must be a tensor of its own, as on the others.
        return host.clone() if host.data_ptr() == tensor.data_ptr() else host
    root_slot = slots[group.ranks.index(root_rank)]
    out = torch.empty_like(host)
    if out.numel():
        c.peer_part(root_slot["part"]).read(0, as_bytes(out))
    return out


def alltoall(group, name, tensor, splits):
    """Rows splits[i] of this rank go to set rank i; returns what this rank
    received (in source order) and how many rows from each."""
    c = group.collective(name)
    host = to_host(tensor)
    part_name = c.write_part(as_bytes(host))
    slots = c.arrive(_meta("alltoall", tensor, splits=list(splits), part=part_name))
    if c.joined:  # (before check(): a joined rank's slot is empty)
        raise CollectiveError("Alltoall is not supported with Join at this time.")
    check("alltoall", slots)
    me = group.index
    received = [s["splits"][me] for s in slots]
    shape = list(slots[me]["shape"])
    rows_total = sum(received)
    out = torch.empty([rows_total] + shape[1:], dtype=host.dtype)
    row_elems = 1
    for d in shape[1:]:
        row_elems *= d
    _read_parts(c, slots, lambda i, s: s["splits"][me], row_elems * host.element_size(), out,
                offset_rows_of=lambda i, s: sum(s["splits"][:me]))
    return out, received


def barrier(group):
    c = group.collective("barrier.noname")
    c.arrive({"op": "barrier", "dtype": "", "shape": [], "device": "CPU"})
