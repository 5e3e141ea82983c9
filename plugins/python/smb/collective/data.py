"""The data side of the collectives, framework neutral: a tensor is its
bytes as a flat NumPy uint8 array (a view of the framework's memory, no
copy), its element type by name ("float32", "bfloat16", ...) and its shape.
Framework layers (smb.torch, smb.tensorflow, smb.collective.numpy_ops)
convert to and from their tensors and do the scaling in their own types.

Reductions run on the memory servers: the first participating rank copies
its input into the result region, the others wait for that and add (min,
max, multiply) theirs, all wait for the version that says every
contribution is in, and read. Gathers, broadcasts and all-to-all read each
rank's part buffer. fabric.py has the arrival protocol these start with.

Each function takes the collective's full name ("allreduce.<name>", as
Horovod names it): it names the collective in the fabric, and in stall
warnings and errors.
"""

import math
import os

import numpy as np

from . import fabric
from .fabric import CollectiveError
from .timeline import phase

# Horovod's names for the ops in error messages.
_KIND = {"allreduce": "ALLREDUCE", "allgather": "ALLGATHER", "broadcast": "BROADCAST", "alltoall": "ALLTOALL",
         "reducescatter": "REDUCESCATTER", "barrier": "BARRIER"}
_SERVER_OP = {"sum": "accumulate", "average": "accumulate", "min": "min", "max": "max", "product": "product"}


class Tensor:
    """A contiguous host tensor as the collectives see it."""

    def __init__(self, data, dtype, shape, itemsize, device="CPU"):
        self.data = data          # flat uint8 view of the bytes
        self.dtype = dtype        # element type name, e.g. "float32"
        self.shape = tuple(shape)
        self.itemsize = itemsize
        self.device = device      # "CPU" or "GPU": ranks must agree

    @property
    def numel(self):
        return math.prod(self.shape)

    @property
    def row_bytes(self):
        return math.prod(self.shape[1:]) * self.itemsize if self.shape else self.itemsize


def meta(kind, t, **extra):
    return dict(op=kind, dtype=t.dtype, shape=list(t.shape), device=t.device, **extra)


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


def _reduction(c, t):
    """Before arriving: the reduction buffer this tensor will use."""
    dt = fabric.REDUCIBLE.get(t.dtype)
    if dt is None:
        raise ValueError(f"Tensor type {t.dtype} is not supported.")
    return dt, c.reduction_buffer(dt, max(1, t.numel * t.itemsize))


def _reduce_into(c, dt, entry, t, red, first=0, rows=None, out=None):
    """After arriving: the server-side reduction of `t` over the set's live
    ranks; returns the bytes of rows [first, first + rows) of the result
    (all of it by default), read into `out` where given (uint8, that size)."""
    group = c.group
    entry.begin([i for i in range(group.size) if i not in c.joined])
    buf, striping = entry.buffer, entry.striping
    me = entry.participants.index(group.index)
    result = striping.offset(c.generation % 2)  # the region of two generations ago is free again
    mine = striping.offset(2 + group.index)
    with phase("WRITE"):
        buf.write(mine, t.data)
    with phase("SERVER_OP"):
        if me == 0:
            buf.apply_from("copy", buf, dt, result, t.numel, mine)
        else:
            c.wait_data(buf, entry.expected + 1, entry.participants[:1])
            buf.apply_from(_SERVER_OP[red], buf, dt, result, t.numel, mine)
    with phase("WAIT"):
        c.wait_data(buf, entry.expected + len(entry.participants), entry.participants)
    entry.finish()
    nbytes = t.data.nbytes if rows is None else rows * t.row_bytes
    if out is None:
        out = np.empty(nbytes, dtype=np.uint8)
    with phase("READ"):
        if nbytes:
            buf.read(result + first * t.row_bytes, out)
    return out


# Reductions of a small tensor on each rank (fabric.py, "inline"): NumPy's
# ufuncs, for the types NumPy has (not bfloat16: that one goes to the servers).
_LOCAL_REDUCE = {"sum": np.add, "average": np.add, "min": np.minimum, "max": np.maximum, "product": np.multiply}
_NUMPY_TYPES = {"float32", "float64", "float16", "uint8", "int8", "int16", "int32", "int64"}
_CXX_TYPES = _NUMPY_TYPES - {"float16"}  # reduced by smb._core.ArrivalBoard


def _fits_slot(group, t):
    """Whether the tensor's bytes travel in its arrival slot (fabric.py, "inline")."""
    return t.data.nbytes <= group.inline_bytes


def _inline(group, t):
    """Whether this tensor's reduction travels in the arrival slots: the same
    answer on every rank whose dtype and shape agree (those that do not
    fail check() before either path goes on)."""
    return t.dtype in _NUMPY_TYPES and _fits_slot(group, t)


def _reduce_in_order(red, arrays):
    """The reduction of `arrays` (NumPy, one dtype) one after another, in
    their order: every rank that reduces the same arrays gets the same bits."""
    ufunc = _LOCAL_REDUCE[red]
    out = None
    for x in arrays:
        out = x.copy() if out is None else ufunc(out, x, out=out)
    return out


def _reduce_inline(c, t, red):
    """The reduction of the live ranks' payloads, in set order on every rank."""
    return _reduce_in_order(red, (np.frombuffer(payload, dtype=t.dtype, count=t.numel)
                                  for i, payload in enumerate(c.payloads) if i not in c.joined)).view(np.uint8)


# Where a large allreduce is reduced: "servers" (accumulate on the memory
# servers), "ranks" (each rank reduces one shard: a reduce-scatter and
# allgather through the fabric) or "auto", the default: on the ranks where
# this rank maps the whole reduction buffer (one host, shared memory: each
# shard is one pass in C++ over the mapping, mapped_shard.hpp), else on
# the servers. docs/benchmarks.md has the measurements behind it. The
# ranks' path runs only where every rank chose it.
_REDUCTION = os.environ.get("SMB_TORCH_REDUCTION", "auto")
_BY_RANKS_FROM = 64 * 1024  # bytes: below, one shard per rank is too small to pay for its reads


def _by_ranks(t, entry, group):
    if _REDUCTION not in ("ranks", "auto") or t.dtype not in _NUMPY_TYPES or t.data.nbytes < _BY_RANKS_FROM:
        return False
    return _REDUCTION == "ranks" or (t.dtype in _CXX_TYPES and _maps_whole(entry, group))


def _maps_whole(entry, group):
    """Whether this rank maps every region of the reduction buffer (both
    results and every rank's input): found once per buffer."""
    if entry.mapped is None:
        striping = entry.striping
        regions = [striping.offset(i) for i in range(2 + group.size)]
        entry.mapped = fabric._core.maps_regions(entry.buffer._b, regions, 0, striping.region,
                                                 striping.stripe_unit)
    return entry.mapped


def _reduce_by_ranks(c, entry, t, red, out=None):
    """After arriving (every rank's input already in its region): rank k of
    the W reduces shard k of every input in set order and writes it into
    the result region, counts itself done on the ctl (one op), waits for
    all W and reads the whole result (into `out` where given)."""
    group = c.group
    buf, striping = entry.buffer, entry.striping
    result = striping.offset(c.generation % 2)
    w, nbytes = group.size, t.data.nbytes
    per = -(-t.numel // w) * t.itemsize
    lo = min(group.index * per, nbytes)
    hi = min(lo + per, nbytes)
    if hi > lo and not _reduce_shard_in_mapping(buf, striping, t, red, result, w, lo, hi):
        parts = np.empty((w, hi - lo), dtype=np.uint8)
        with phase("READ"):
            for r in [buf.read_async(striping.offset(2 + k) + lo, parts[k]) for k in range(w)]:
                r.wait()
        shard = _reduce_in_order(red, parts.view(t.dtype))
        with phase("WRITE"):
            buf.write(result + lo, shard.view(np.uint8))
    c.board.mark(1, c.generation)  # this rank's shard is in
    with phase("WAIT"):
        c.wait_done(list(range(w)))
    if out is None:
        out = np.empty(nbytes, dtype=np.uint8)
    with phase("READ"):
        buf.read(result, out)
    return out


def _reduce_shard_in_mapping(buf, striping, t, red, result, w, lo, hi):
    """The shard [lo, hi) combined in C++ where this rank maps every rank's
    input and the result (one host, shared memory): one pass, no copies
    (mapped_shard.hpp). False where it does not (nothing written then)."""
    if t.dtype not in _CXX_TYPES:
        return False
    with phase("REDUCE"):
        return fabric._core.reduce_mapped_shard(buf._b, fabric.REDUCIBLE[t.dtype], red, result,
                                                [striping.offset(2 + k) for k in range(w)], lo, hi,
                                                striping.stripe_unit)


def _inline_keys(t, red, prescale, postscale):
    """Collective._keyed()'s arguments for a small allreduce of `t`."""
    key_of = (t.dtype, t.shape, t.device, red, prescale, postscale)
    return key_of, lambda: meta("allreduce", t, red=red, pre=prescale, post=postscale)


def allreduce_lane(group, name, t, red, postscale, factor=1.0):
    """A fabric.InlineLane for allreduce(group, name, t, red, 1.0, postscale)
    calls on tensors like `t`, or None where such a call does not take the
    C++ inline path (too large, empty, or a type NumPy reduces). `factor`:
    the final scaling (1/size for an average, times postscale), which the
    lane applies where C++ scales the dtype (InlineLane)."""
    if not (_inline(group, t) and t.dtype in _CXX_TYPES and t.numel):
        return None
    key_of, the_meta = _inline_keys(t, red, 1.0, postscale)
    return fabric.InlineLane(group.collective(name), key_of, the_meta, fabric.REDUCIBLE[t.dtype], red, t.data.nbytes,
                             factor)


def _allreduce_inline(c, t, red, prescale, postscale, out):
    """A small tensor's allreduce: its bytes travel in the arrival slots, and
    each rank reduces them (in C++ where the dtype allows, else NumPy)."""
    key_of, the_meta = _inline_keys(t, red, prescale, postscale)
    if t.dtype in _CXX_TYPES and t.numel:
        if out is None:
            out = np.empty(t.data.nbytes, dtype=np.uint8)
        if c.allreduce_inline(key_of, the_meta, t.data, fabric.REDUCIBLE[t.dtype], red, out):
            return out, bool(c.joined)
    else:
        c.arrive_keyed(key_of, the_meta, t.data)
    return inline_mismatch(c, t, red, out)


def inline_mismatch(c, t, red, out):
    """After an inline allreduce the C++ board did not reduce: some rank's
    metadata differs (check() names it and raises), or NumPy reduces this
    dtype. The result as allreduce() returns it."""
    check("allreduce", c._read_slots(c.generation), c.joined)
    if t.numel == 0:
        return np.empty(0, dtype=np.uint8), bool(c.joined)
    return _into(out, _reduce_inline(c, t, red)), bool(c.joined)


def _into(out, result):
    """`result` (uint8) in `out` where given, else itself."""
    if out is None:
        return result
    out[:] = result
    return out


def allreduce(group, name, t, red, prescale, postscale, out=None):
    """The reduction over the set (scaled by the caller). Returns the result's
    bytes, in `out` where given (a uint8 array of t's size, which may be
    t.data itself: it is read only after t's bytes have left), and whether
    ranks had joined (they count as zeros, Horovod's rule: the caller
    applies that for min, max and product)."""
    c = group.collective(name)
    if _inline(group, t):
        return _allreduce_inline(c, t, red, prescale, postscale, out)
    dt, entry = _reduction(c, t)
    by_ranks = _by_ranks(t, entry, group)
    if by_ranks:  # others read it as soon as they see this rank arrive
        with phase("WRITE"):
            entry.buffer.write(entry.striping.offset(2 + group.index), t.data)
    slots = c.arrive(meta("allreduce", t, red=red, pre=prescale, post=postscale, ranks=by_ranks))
    check("allreduce", slots, c.joined)
    if t.numel == 0:
        return np.empty(0, dtype=np.uint8), bool(c.joined)
    # Only where every rank chose it (the environment could differ) and none joined.
    if not c.joined and all(s.get("ranks") for s in slots):
        return _reduce_by_ranks(c, entry, t, red, out), False
    return _reduce_into(c, dt, entry, t, red, out=out), bool(c.joined)


def scatter_rows(rows, size, index):
    """Rank `index` of `size` gets q+1 rows if index < rows mod size, else q
    (q = rows div size), in rank order: (first row, count)."""
    q, r = divmod(rows, size)
    return index * q + min(index, r), q + (1 if index < r else 0)


def reducescatter(group, name, t, red, prescale, postscale):
    """The reduction, each rank reading only its rows (scatter_rows)."""
    c = group.collective(name)
    dt, entry = _reduction(c, t)
    slots = c.arrive(meta("reducescatter", t, red=red, pre=prescale, post=postscale))
    check("reducescatter", slots, c.joined)
    if c.joined:
        raise CollectiveError("Reducescatter is not supported with Join at this time.")
    first, rows = scatter_rows(t.shape[0], group.size, group.index)
    if t.numel == 0:
        return np.empty(0, dtype=np.uint8), rows
    return _reduce_into(c, dt, entry, t, red, first, rows), rows


def _offer(c, t):
    """How this rank's part travels: in its arrival slot when it fits
    (fabric.py, "inline"), else in its part buffer. Returns the metadata
    that says which, and the slot's payload."""
    if _fits_slot(c.group, t):
        return {"inline": True}, t.data
    return {"part": c.write_part(t.data)}, None


def _read_part(c, i, s, src, out):
    """Bytes [src, src + len(out)) of set rank i's part into `out`: from its
    slot, or a read started from its part buffer (returned, to wait for)."""
    if s.get("inline"):
        out[:] = np.frombuffer(c.payloads[i], dtype=np.uint8, count=src + out.nbytes)[src:]
        return None
    return c.peer_part(s["part"]).read_async(src, out)


def _read_parts(c, slots, rows_of, row_bytes, out, offset_rows_of=None):
    """Reads every rank's part (in set order) into consecutive rows of `out`."""
    requests = []
    at = 0
    for i, s in enumerate(slots):
        rows = rows_of(i, s)
        if rows:
            src = (offset_rows_of(i, s) if offset_rows_of else 0) * row_bytes
            requests.append(_read_part(c, i, s, src, out[at * row_bytes:(at + rows) * row_bytes]))
        at += rows
    with phase("READ"):
        for r in requests:
            if r is not None:
                r.wait()


def allgather(group, name, t):
    """Concatenation along dimension 0 in set rank order (first dimensions
    may differ). Returns the bytes and the shape."""
    c = group.collective(name)
    where, payload = _offer(c, t)
    slots = c.arrive(meta("allgather", t, **where), payload=payload)
    if c.joined:  # (before check(): a joined rank's slot is empty)
        raise CollectiveError("Allgather is not supported with Join at this time. Specify sparse_to_dense=True if "
                              "using DistributedOptimizer")
    check("allgather", slots)
    shape = [sum(s["shape"][0] for s in slots)] + slots[0]["shape"][1:]
    out = np.empty(math.prod(shape) * t.itemsize, dtype=np.uint8)
    _read_parts(c, slots, lambda i, s: s["shape"][0], t.row_bytes, out)
    return out, shape


def broadcast(group, name, t, root_rank):
    """The root's bytes on every rank; None on the root itself (it has them)."""
    c = group.collective(name)
    me_root = group.runtime.rank == root_rank
    where, payload = _offer(c, t) if me_root else ({"part": None}, None)
    slots = c.arrive(meta("broadcast", t, root=root_rank, **where), payload=payload)
    if c.joined:  # (before check(): a joined rank's slot is empty)
        raise CollectiveError("Broadcast is not supported with Join at this time.")
    check("broadcast", slots)
    if me_root:
        return None
    out = np.empty(t.data.nbytes, dtype=np.uint8)
    if out.nbytes:
        root = group.ranks.index(root_rank)
        request = _read_part(c, root, slots[root], 0, out)
        if request is not None:
            request.wait()
    return out


def alltoall(group, name, t, splits):
    """Rows splits[i] of this rank go to set rank i. Returns the bytes
    received (in source order), how many rows came from each rank, and the
    shape."""
    c = group.collective(name)
    where, payload = _offer(c, t)
    slots = c.arrive(meta("alltoall", t, splits=list(splits), **where), payload=payload)
    if c.joined:  # (before check(): a joined rank's slot is empty)
        raise CollectiveError("Alltoall is not supported with Join at this time.")
    check("alltoall", slots)
    me = group.index
    received = [s["splits"][me] for s in slots]
    shape = [sum(received)] + list(slots[me]["shape"][1:])
    out = np.empty(math.prod(shape) * t.itemsize, dtype=np.uint8)
    _read_parts(c, slots, lambda i, s: s["splits"][me], t.row_bytes, out,
                offset_rows_of=lambda i, s: sum(s["splits"][:me]))
    return out, received, shape


def barrier(group):
    c = group.collective("barrier.noname")
    c.arrive({"op": "barrier", "dtype": "", "shape": [], "device": "CPU"})
