"""Horovod's collective API (horovod.torch.mpi_ops), over the fabric.

Every *_async call starts the collective in the background and returns an
int handle (smb.collective.handles: poll, synchronize, names reserved until
synchronized). Errors that ranks find together (shape, dtype, op, root
mismatches) arrive as HorovodInternalError on every rank; errors a rank
finds alone in its call (bad arguments) are ValueError.
"""

import contextlib
import warnings

import torch

from smb.collective import basics, data, handles, joining, timeline
from smb.collective.fabric import REDUCIBLE, HorovodInternalError
from smb.collective.handles import next_handle, poll, run_here, run_now, submit, synchronize
from smb.collective.process_sets import global_process_set, group_of

from . import collectives
from .compression import Compression, from_name

Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5
_RED = {Average: "average", Sum: "sum", Min: "min", Max: "max", Product: "product"}

def _reduce_op(op, average):
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if op is not None:
        return op
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed in v1.0",
                      DeprecationWarning)
        return Average if average else Sum
    return Average


def _check_reducible(tensor, op, process_set):
    if op == Adasum:
        raise NotImplementedError("Adasum is not supported by smb.torch: use op=hvd.Average (or Sum), or "
                                  "DistributedOptimizer(mode='seasgd') for asynchronous averaging")
    if op not in _RED:
        raise ValueError(f"unknown reduction op {op}")
    if collectives.dtype_name(tensor.dtype) not in REDUCIBLE:
        raise ValueError(f"Tensor type {tensor.type()} is not supported.")


def _back_to(tensor, out):
    """`out` (a CPU result) on `tensor`'s device."""
    return out if out.device == tensor.device else out.to(tensor.device)


# ------------------------------------------------------------------ allreduce


def _readable_into(tensor):
    """Whether an in-place result can be reduced in the tensor's own memory
    (a contiguous tensor: on the CPU with no copy at all, on a CUDA device
    through one staging copy each way), with no result tensor."""
    return tensor.is_contiguous() and tensor.device.type in ("cpu", "cuda")


def _storage_at(t):
    """The address of the storage under t (untyped_storage where torch has it)."""
    return (t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()).data_ptr()


def _flat_span(tensors):
    """One flat view over tensors that lie one after another in one storage
    (as a fused bucket's gradients do: DistributedOptimizer keeps them so),
    else None."""
    first = tensors[0]
    if not all(_readable_into(t) and t.dtype == first.dtype and t.device == first.device for t in tensors):
        return None
    at, storage = first.data_ptr(), _storage_at(first)
    for t in tensors:
        if t.data_ptr() != at or _storage_at(t) != storage:
            return None
        at += t.numel() * t.element_size()
    return first.detach().as_strided((sum(t.numel() for t in tensors),), (1,), first.storage_offset())


def _allreduce_work(tensor, average, op, prescale_factor, postscale_factor, in_place):
    """work(group, full_name) of an allreduce of `tensor`, its arguments checked."""
    op = _reduce_op(op, average)
    _check_reducible(tensor, op, None)
    ready = collectives.ready_event(tensor)
    args = (_RED[op], float(prescale_factor), float(postscale_factor))

    def work(group, full):
        with collectives.side_stream(tensor.device, ready):
            return reduce(group, full)

    def reduce(group, full):
        if in_place and _readable_into(tensor):
            collectives.allreduce_(group, full, tensor.data, *args)
            return tensor
        if tensor.device.type == "cuda":  # a result of its own on the device, reduced there in place
            result = tensor.detach().clone(memory_format=torch.contiguous_format)
            collectives.allreduce_(group, full, result, *args)
        else:
            result = collectives.allreduce(group, full, tensor, *args)
        if not in_place:
            return _back_to(tensor, result)
        tensor.data.copy_(result)
        return tensor

    return work


def _allreduce_submit(tensor, average, name, op, prescale_factor, postscale_factor, process_set, in_place):
    handle = next_handle()
    work = _allreduce_work(tensor, average, op, prescale_factor, postscale_factor, in_place)
    return submit(handle, process_set, "Allreduce", "allreduce", name, work)


def _allreduce_now(tensor, average, name, op, prescale_factor, postscale_factor, process_set, in_place):
    """The synchronous allreduce in this thread, without a handle (run_now)."""
    work = _allreduce_work(tensor, average, op, prescale_factor, postscale_factor, in_place)
    return run_now(process_set, "Allreduce", "allreduce", name, work)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts an allreduce into a new tensor; returns a handle."""
    return _allreduce_submit(tensor, average, name, op, prescale_factor, postscale_factor, process_set, False)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts an in-place allreduce; returns a handle."""
    return _allreduce_submit(tensor, average, name, op, prescale_factor, postscale_factor, process_set, True)


class _Allreduce(torch.autograd.Function):
    """The gradient of an allreduce is the allreduce of the gradient (same op and factors)."""

    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        ctx.args = (average, op, prescale_factor, postscale_factor, process_set)
        return run_here(lambda: allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor,
                                                process_set))

    @staticmethod
    def backward(ctx, grad):
        average, op, pre, post, process_set = ctx.args
        return (allreduce(grad, average=average, op=op, prescale_factor=pre, postscale_factor=post,
                          process_set=process_set), None, None, None, None, None, None)


def _allreduce_lane(tensor, average, name, op, prescale_factor, postscale_factor, process_set, in_place=False):
    """hvd.allreduce's commonest small case in a few calls: a named,
    contiguous CPU tensor that travels in its arrival slot, needs no
    gradient and no prescale, with no timeline being written. The same
    collective as the full path (same name, handle count, checks and
    result); None where that path must run instead. A small allreduce
    costs microseconds, and each Python call and torch call of the full
    path's layers (handle, reservation, autograd, views, conversions) adds
    about one: so the lane keeps what is fixed per signature (name, dtype,
    shape, reduction, scaling) in one object, built on first use, as
    Horovod's response cache does, and each call passes the tensors' addresses.
    in_place: the result goes into `tensor` (the board copies each rank's
    bytes into its slot before it writes any result)."""
    if not name or prescale_factor != 1.0 or not tensor.is_cpu or not tensor.is_contiguous() or timeline.recording():
        return None
    group = group_of(process_set, "Allreduce")
    red = _RED.get(_reduce_op(op, average))
    signature = (name, tensor.dtype, tensor.shape, red, postscale_factor)
    lane = group.lanes.get(signature)
    if lane is None:
        lane = group.lanes[signature] = _Lane.build(group, tensor, name, red, postscale_factor)
    if not lane:
        return None  # the full path takes this signature
    handles.check_not_outstanding(group, lane.full)
    next_handle()  # as the full path counts handles
    out = tensor if in_place else torch.empty(lane.shape, dtype=lane.dtype)
    try:
        factor = lane.inline(tensor.data_ptr(), out.data_ptr(), lambda: collectives.as_bytes(out).numpy())
        if factor is None:
            data.inline_mismatch(lane.inline.collective, lane.view(tensor), red, collectives.as_bytes(out).numpy())
    except (HorovodInternalError, ValueError, TypeError, NotImplementedError):
        raise
    except Exception as e:  # smb.Error and the like: the collective failed
        raise HorovodInternalError(str(e)) from e
    return collectives.finish_(out, lane.inline.collective.joined, red, factor)


class _Lane:
    """What _allreduce_lane keeps per signature; build() returns False for
    a signature the full path takes (type, size, reduction)."""

    def __init__(self, tensor, name, inline):
        self.full = "allreduce." + name
        self.dtype, self.shape = tensor.dtype, tensor.shape
        self.inline = inline

    @staticmethod
    def build(group, tensor, name, red, postscale):
        if red is None or collectives.dtype_name(tensor.dtype) not in data._CXX_TYPES:
            return False  # (the full path says what is wrong, or reduces it)
        factor = collectives.final_factor(group, red, float(postscale))
        inline = data.allreduce_lane(group, "allreduce." + name, _Lane.view(tensor), red, float(postscale), factor)
        return inline and _Lane(tensor, name, inline)

    @staticmethod
    def view(tensor):
        """The tensor as smb.collective.data sees it: a CPU tensor's bytes, no copy."""
        t = tensor.detach()
        return data.Tensor(collectives.as_bytes(t).numpy(), collectives.dtype_name(t.dtype), t.shape,
                           t.element_size())


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """A new tensor: the reduction (default: average) of `tensor` over the set."""
    if compression is Compression.none and not (tensor.requires_grad and torch.is_grad_enabled()):
        result = _allreduce_lane(tensor, average, name, op, prescale_factor, postscale_factor, process_set)
        if result is not None:
            return result
    compression = from_name(compression)
    compressed, ctx = compression.compress(tensor)
    if compressed.requires_grad and torch.is_grad_enabled():
        summed = _Allreduce.apply(compressed, average, name, op, prescale_factor, postscale_factor, process_set)
    else:  # no graph to record: the autograd Function's cost is all it would add
        summed = _allreduce_now(compressed, average, name, op, prescale_factor, postscale_factor, process_set, False)
    return compression.decompress(summed, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """In place; returns `tensor`."""
    if not (tensor.requires_grad and torch.is_grad_enabled()):
        result = _allreduce_lane(tensor, average, name, op, prescale_factor, postscale_factor, process_set, True)
        if result is not None:
            return result
    return _allreduce_now(tensor, average, name, op, prescale_factor, postscale_factor, process_set, True)


def _grouped_work(tensors, op, pre, post, in_place):
    """One fused allreduce per dtype of the list, split back by position."""
    ready = collectives.ready_event(tensors[0])

    def work(group, full):
        with collectives.side_stream(tensors[0].device, ready):
            return reduce(group, full)

    def reduce(group, full):
        by_dtype = {}
        for i, t in enumerate(tensors):
            by_dtype.setdefault(t.dtype, []).append(i)
        results = [None] * len(tensors)
        for dtype, positions in sorted(by_dtype.items(), key=lambda kv: str(kv[0])):
            part_name = f"{full}.{collectives.dtype_name(dtype)}"
            args = (_RED[op], float(pre), float(post))
            group_of = [tensors[i] for i in positions]
            span = _flat_span(group_of) if in_place else None
            if span is not None:  # the bucket in place: nothing to gather or scatter back
                collectives.allreduce_(group, part_name, span, *args)
                for i in positions:
                    results[i] = tensors[i]
                continue
            on_device = group_of[0].device.type == "cuda"
            numel = sum(t.numel() for t in group_of)
            # Fused on the device (its allocator keeps the memory), else in a
            # buffer of the pool; reduced in place either way.
            fused = (contextlib.nullcontext(torch.empty(numel, dtype=dtype, device=group_of[0].device)) if on_device
                     else collectives.fusion_buffer(dtype, numel))
            with fused as flat:
                # (to_host: a CPU tensor itself, another device's a copy)
                torch.cat([(t.detach() if on_device else collectives.to_host(t)).reshape(-1) for t in group_of],
                          out=flat)
                collectives.allreduce_(group, part_name, flat, *args)
                at = 0
                for i in positions:
                    n = tensors[i].numel()
                    part = flat[at:at + n].view(tensors[i].shape)
                    at += n
                    if in_place:
                        tensors[i].data.copy_(part)
                        results[i] = tensors[i]
                    else:  # a buffer of the pool goes back: each result then a tensor of its own
                        results[i] = part if on_device else _back_to(tensors[i], part.clone())
        return results

    return work


def _grouped_check(tensors, op, process_set):
    if not tensors:
        raise ValueError("grouped_allreduce needs at least one tensor")
    if len({t.device for t in tensors}) > 1:
        raise HorovodInternalError("Tensors in list must be on same device.")
    for t in tensors:
        _check_reducible(t, op, process_set)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    handle = next_handle()
    op = _reduce_op(op, average)
    _grouped_check(tensors, op, process_set)
    return submit(handle, process_set, "Allreduce", "grouped_allreduce", name,
                   _grouped_work(list(tensors), op, prescale_factor, postscale_factor, False), tuple)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    handle = next_handle()
    op = _reduce_op(op, average)
    _grouped_check(tensors, op, process_set)
    return submit(handle, process_set, "Allreduce", "grouped_allreduce", name,
                   _grouped_work(list(tensors), op, prescale_factor, postscale_factor, True), tuple)


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.args = (average, op, prescale_factor, postscale_factor, process_set)
        return run_here(lambda: grouped_allreduce_async(list(tensors), average, name, op, prescale_factor,
                                                        postscale_factor, process_set))

    @staticmethod
    def backward(ctx, *grads):
        average, op, pre, post, process_set = ctx.args
        reduced = grouped_allreduce([g.contiguous() for g in grads], average=average, op=op, prescale_factor=pre,
                                    postscale_factor=post, process_set=process_set)
        return (None, None, None, None, None, None, *reduced)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """A list: each tensor reduced (fused into one collective per dtype)."""
    compression = from_name(compression)
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
    reduced = _GroupedAllreduce.apply(average, name, op, prescale_factor, postscale_factor, process_set, *compressed)
    return [compression.decompress(t, c) for t, c in zip(reduced, ctxs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    return run_here(lambda: grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                     process_set))


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """A sparse COO tensor reduced by gathering its indices and values;
    returns a callable that waits and returns the (uncoalesced) result."""
    indices = allgather_async(tensor._indices().t().contiguous(), name=f"{name}.indices", process_set=process_set)
    values = allgather_async(tensor._values(), name=f"{name}.values", process_set=process_set)

    def handle():
        v = synchronize(values)
        i = synchronize(indices)
        if v.dim() == 0 or i.dim() == 0:
            return torch.sparse_coo_tensor(size=tensor.size(), dtype=tensor.dtype, device=tensor.device)
        if op == Average:
            v = v / process_set.size()
        return tensor.new(i.t(), v, tensor.size())

    return handle


# ------------------------------------------------------------------ allgather


def allgather_async(tensor, name=None, process_set=global_process_set):
    handle = next_handle()
    return submit(handle, process_set, "Allgather", "allgather", name,
                   lambda group, full: _back_to(tensor, collectives.allgather(group, full, tensor)))


class _Allgather(torch.autograd.Function):
    """Backward: the gradient averaged over the set, this rank's rows of it."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows = tensor.shape[0]
        ctx.process_set = process_set
        return run_here(lambda: allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        grad = allreduce(grad.contiguous(), op=Average, process_set=ctx.process_set)
        rows = run_here(lambda: allgather_async(torch.tensor([ctx.rows], dtype=torch.int32),
                                                process_set=ctx.process_set))
        offset = int(rows[:ctx.process_set.rank()].sum())
        return grad.narrow(0, offset, ctx.rows), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenation over the set along dimension 0 (first dimensions may differ)."""
    return _Allgather.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    handle = next_handle()
    tensors = list(tensors)

    def work(group, full):
        n = len(tensors)
        return [_back_to(t, collectives.allgather(group, f"{full}_{i + 1}of{n}", t)) for i, t in enumerate(tensors)]

    return submit(handle, process_set, "Allgather", "grouped_allgather", name, work, tuple)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """A tuple: each tensor gathered."""

    class _Grouped(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *ts):
            ctx.rows = [t.shape[0] for t in ts]
            return run_here(lambda: grouped_allgather_async(list(ts), name, process_set))

        @staticmethod
        def backward(ctx, *grads):
            out = []
            for g, rows in zip(grads, ctx.rows):
                g = allreduce(g.contiguous(), op=Average, process_set=process_set)
                sizes = run_here(lambda: allgather_async(torch.tensor([rows], dtype=torch.int32),
                                                         process_set=process_set))
                out.append(g.narrow(0, int(sizes[:process_set.rank()].sum()), rows))
            return tuple(out)

    return _Grouped.apply(*tensors)


# ------------------------------------------------------------------ broadcast


def _check_root(root_rank, process_set):
    state = basics.state()
    ranks = state.set_ranks.get(process_set.process_set_id, [])
    if root_rank not in ranks:
        raise ValueError(f"broadcast received invalid root rank {root_rank} for provided process set")


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    handle = next_handle()
    _check_root(root_rank, process_set)
    return submit(handle, process_set, "Broadcast", "broadcast", name,
                   lambda group, full: _back_to(tensor, collectives.broadcast(group, full, tensor, root_rank)))


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    handle = next_handle()
    _check_root(root_rank, process_set)

    def work(group, full):
        out = collectives.broadcast(group, full, tensor, root_rank)
        if out.data_ptr() != tensor.data_ptr():
            tensor.data.copy_(out)
        return tensor

    return submit(handle, process_set, "Broadcast", "broadcast", name, work)


class _Broadcast(torch.autograd.Function):
    """Backward: the gradient averaged over the set, on the root only."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return run_here(lambda: broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        reduced = allreduce(grad.contiguous(), op=Average, process_set=ctx.process_set)
        if basics.rank() != ctx.root_rank:
            reduced = reduced * 0
        return reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """A new tensor holding the root's `tensor` (root_rank is a global rank)."""
    return _Broadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In place; returns `tensor`."""
    return run_here(lambda: broadcast_async_(tensor, root_rank, name, process_set))


# ------------------------------------------------------------------ alltoall


def _splits(tensor, splits, process_set):
    size = len(basics.state().set_ranks[process_set.process_set_id])
    if splits is None:
        if tensor.dim() == 0 or tensor.shape[0] % size != 0:
            raise ValueError("splits not provided, but first dimension of tensor is not an even multiple of the "
                             "number of workers.")
        return [tensor.shape[0] // size] * size
    if isinstance(splits, (list, tuple)):
        splits = torch.tensor(splits, dtype=torch.int32)
    if splits.dim() != 1:
        raise ValueError("alltoall expects a 1D splits tensor")
    if splits.dtype != torch.int32:
        raise ValueError("alltoall expects splits to contain 32-bit integer elements.")
    values = [int(v) for v in splits.cpu()]
    if len(values) != size:
        raise ValueError("Number of entries in splits does not equal number of workers.")
    if sum(values) > (tensor.shape[0] if tensor.dim() else 0):
        raise ValueError("Sum of splits entries is greater than the first dimension of tensor.")
    return values


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    handle = next_handle()
    group_of(process_set, "Alltoall")
    values = _splits(tensor, splits, process_set)
    splits_device = splits.device if isinstance(splits, torch.Tensor) else torch.device("cpu")

    def work(group, full):
        out, received = collectives.alltoall(group, full, tensor, values)
        return _back_to(tensor, out), torch.tensor(received, dtype=torch.int32, device=splits_device)

    return submit(handle, process_set, "Alltoall", "alltoall", name, work)


class _Alltoall(torch.autograd.Function):
    """Backward: the gradient's blocks sent back where they came from."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, received = run_here(lambda: alltoall_async(tensor, splits, name, process_set))
        ctx.received = received
        ctx.rows = tensor.shape[0] if tensor.dim() else 0
        ctx.process_set = process_set
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, _):
        back, _ = run_here(lambda: alltoall_async(grad.contiguous(), ctx.received, process_set=ctx.process_set))
        if back.shape[0] < ctx.rows:
            # Rows past sum(splits) were not sent: their gradient is zero (and
            # autograd needs the input's shape).
            back = torch.cat([back, back.new_zeros((ctx.rows - back.shape[0],) + tuple(back.shape[1:]))])
        return back, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Rows splits[i] go to set rank i; returns the received rows, and with
    `splits` also how many came from each rank."""
    out, received = _Alltoall.apply(tensor, splits, name, process_set)
    return out if splits is None else (out, received)


# ------------------------------------------------------------------ reducescatter


def _check_reducescatter(tensor, op, process_set):
    if tensor.dim() == 0:
        raise ValueError("Reducescatter does not support scalar inputs")
    if op not in (Sum, Average):
        raise HorovodInternalError("Reducescatter currently only supports AVERAGE and SUM.")
    _check_reducible(tensor, op, process_set)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    handle = next_handle()
    _check_reducescatter(tensor, op, process_set)

    def work(group, full):
        return _back_to(tensor, collectives.reducescatter(group, full, tensor, _RED[op], float(prescale_factor),
                                                          float(postscale_factor)))

    return submit(handle, process_set, "Reducescatter", "reducescatter", name, work)


class _Reducescatter(torch.autograd.Function):
    """Backward: the gradient (times the set size for Sum, and the factors) gathered."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.args = (op, process_set, prescale_factor, postscale_factor)
        return run_here(lambda: reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx, grad):
        op, process_set, pre, post = ctx.args
        g = grad.contiguous()
        if op == Sum:
            g = g * process_set.size()
        if pre != 1.0:
            g = g * pre
        if post != 1.0:
            g = g * post
        return allgather(g, process_set=process_set), None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """This rank's rows of the reduction (rank i of P: q+1 rows if i < n mod P, else q)."""
    compression = from_name(compression)
    compressed, ctx = compression.compress(tensor)
    out = _Reducescatter.apply(compressed, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    handle = next_handle()
    tensors = list(tensors)
    for t in tensors:
        _check_reducescatter(t, op, process_set)

    def work(group, full):
        n = len(tensors)
        return [_back_to(t, collectives.reducescatter(group, f"{full}_{i + 1}of{n}", t, _RED[op],
                                                      float(prescale_factor), float(postscale_factor)))
                for i, t in enumerate(tensors)]

    return submit(handle, process_set, "Reducescatter", "grouped_reducescatter", name, work, list)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """A list: each tensor's rows of its reduction."""
    compression = from_name(compression)
    return [reducescatter(t, name=f"{name}.{i}" if name else None, compression=compression, op=op,
                          process_set=process_set, prescale_factor=prescale_factor,
                          postscale_factor=postscale_factor) for i, t in enumerate(tensors)]


# ------------------------------------------------------------------ barrier, join


def barrier(process_set=global_process_set):
    """Returns once every rank of the set has called it."""
    next_handle()
    group = group_of(process_set, "Barrier")
    collectives.barrier(group)


def join(device=-1):
    """This rank has no more data: until every rank has joined, the others'
    allreduces complete with this rank contributing zeros. Returns the
    global rank of the last rank to join (the same on every rank)."""
    next_handle()
    return joining.join(basics.state())
