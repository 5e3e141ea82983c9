"""torch.distributed backend "smb": torch.distributed's collectives through
the fabric, for scripts written against torch.distributed (DDP, FSDP-free
model parallel code, custom loops) rather than Horovod's API.

    import smb.torch                                 # registers the backend
    torch.distributed.init_process_group("smb")      # env:// as usual (torchrun and smbrun set it)
    model = DistributedDataParallel(model)           # gradients through the memory servers

A Python ProcessGroup (torch >= 1.13 lets one subclass it): no libtorch
link, so a torch upgrade needs no rebuild. Every op of a process group
runs on one thread of the group's own, in the order the ranks issue them
(torch requires the same order on every rank), through smb.collective:
each rank writes its part into the servers, the servers reduce, a
notified wait says when all parts are in. Ops return at once with a Work
whose future completes when the op has.

Supported: all_reduce (SUM, AVG, MIN, MAX, PRODUCT), broadcast,
all_gather, all_gather_into_tensor, reduce (an all_reduce), reduce_scatter,
reduce_scatter_tensor, all_to_all_single, all_to_all, gather, scatter,
barrier, new_group. Not supported: send/recv (point to point: use a
collective) and the bitwise ops; both raise with a message saying so.
CPU tensors move in place; CUDA tensors are staged through host memory.
"""

import inspect
import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

from smb.collective import basics, fabric

from . import collectives

BACKEND = "smb"

_REDUCE = {"SUM": "sum", "AVG": "average", "MIN": "min", "MAX": "max", "PRODUCT": "product"}
_groups_created = {}  # ranks -> how many torch groups over exactly them (the same on every member)
_lock = threading.Lock()


def _reduce_op(op):
    for name, red in _REDUCE.items():
        if op == getattr(dist.ReduceOp, name, None):
            return red
    raise RuntimeError(f"smb backend: reduce op {op} is not supported (SUM, AVG, MIN, MAX, PRODUCT are)")


def _agree_on_job(store, rank):
    """A job namespace every rank shares: the launcher's, else one rank 0
    draws and hands out through torch's store."""
    if any(os.environ.get(n) for n in ("SMB_JOB_ID", "OMPI_MCA_ess_base_jobid", "TORCHELASTIC_RUN_ID",
                                       "SLURM_JOB_ID")):
        return
    if rank == 0:
        store.set("smb/job", uuid.uuid4().hex)
    os.environ["SMB_JOB_ID"] = "torch-" + store.get("smb/job").decode()


def _global_ranks(store, rank, size):
    """The global ranks of a group's members, in group rank order (each
    member publishes its own in the group's store)."""
    store.set(f"smb/global-rank/{rank}", str(basics.rank()))
    return [int(store.get(f"smb/global-rank/{i}")) for i in range(size)]


class FabricProcessGroup(dist.ProcessGroup):
    """A torch process group whose collectives run through the fabric."""

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        default = not dist.is_initialized()
        if default:
            _agree_on_job(store, rank)
            basics.init(rank=rank, size=size)
            if basics.rank() != rank or basics.size() != size:
                raise RuntimeError(f"smb backend: torch says rank {rank} of {size}, but smb.torch was initialized "
                                   f"as rank {basics.rank()} of {basics.size()}")
            self._group = basics.state().process_sets[0]
        else:
            ranks = _global_ranks(store, rank, size)
            with _lock:
                n = _groups_created[tuple(ranks)] = _groups_created.get(tuple(ranks), 0) + 1
            set_id = "torch-" + "-".join(map(str, ranks)) if len(ranks) <= 8 else f"torch-{hash(tuple(ranks)):x}"
            self._group = fabric.ProcessGroupState(basics.state(), f"{set_id}.{n}", ranks)
        # One thread: ops run in issue order, which is the same on every rank.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"smb.pg.{rank}")

    def getBackendName(self):  # noqa: N802 - torch's name
        return BACKEND

    # ------------------------------------------------------------ plumbing

    def _run(self, work, result):
        """Runs work() on the group's thread; the Work's future gets `result`."""
        future = torch.futures.Future()

        def run():
            try:
                work()
            except BaseException as e:  # noqa: BLE001 - handed to the waiter
                future.set_exception(e if isinstance(e, Exception) else RuntimeError(str(e)))
            else:
                future.set_result(result)

        self._executor.submit(run)
        return _create_work_from_future(future)

    def _root(self, group_rank):
        return self._group.ranks[group_rank]

    # --------------------------------------------------------- collectives

    def allreduce(self, tensors, opts=None):
        red = _reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)

        def work():
            for t in tensors:
                t.copy_(collectives.allreduce(self._group, "torch.allreduce", t, red, 1.0, 1.0))
        return self._run(work, tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def reduce(self, tensors, opts):
        # Everyone gets the result; torch leaves non-roots' tensors unspecified.
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts):
        root = self._root(opts.rootRank)

        def work():
            for t in tensors:
                out = collectives.broadcast(self._group, "torch.broadcast", t, root)
                if out.data_ptr() != t.data_ptr():
                    t.copy_(out)
        return self._run(work, tensors)

    def allgather(self, output_lists, inputs, opts=None):
        def work():
            for outs, t in zip(output_lists, inputs):
                gathered = collectives.allgather(self._group, "torch.allgather", t.reshape((1,) + tuple(t.shape)))
                for out, part in zip(outs, gathered):
                    out.copy_(part)
        return self._run(work, output_lists)

    def _allgather_base(self, output, input, opts=None):
        def work():
            output.copy_(collectives.allgather(self._group, "torch.allgather", input.reshape(1, -1)).view_as(output))
        return self._run(work, [output])

    def gather(self, output_lists, inputs, opts):
        root = opts.rootRank

        def work():
            for t in inputs:
                gathered = collectives.allgather(self._group, "torch.allgather", t.reshape((1,) + tuple(t.shape)))
                if self._group.index == root:
                    for out, part in zip(output_lists[0], gathered):
                        out.copy_(part)
        return self._run(work, output_lists)

    def scatter(self, outputs, input_lists, opts):
        root = opts.rootRank
        me = self._group.index

        def work():
            for i, out in enumerate(outputs):
                stacked = (torch.stack(input_lists[i]) if me == root
                           else torch.empty((self.size(),) + tuple(out.shape), dtype=out.dtype))
                out.copy_(collectives.broadcast(self._group, "torch.scatter", stacked, self._root(root))[me])
        return self._run(work, outputs)

    def reduce_scatter(self, outputs, input_lists, opts):
        red = _reduce_op(opts.reduceOp)

        def work():
            for out, parts in zip(outputs, input_lists):
                stacked = torch.stack([p.reshape(-1) for p in parts])  # one row per rank
                mine = collectives.reducescatter(self._group, "torch.reducescatter", stacked, red, 1.0, 1.0)
                out.copy_(mine.view_as(out))
        return self._run(work, outputs)

    def _reduce_scatter_base(self, output, input, opts):
        red = _reduce_op(opts.reduceOp)

        def work():
            rows = input.reshape(self.size(), -1)
            mine = collectives.reducescatter(self._group, "torch.reducescatter", rows, red, 1.0, 1.0)
            output.copy_(mine.view_as(output))
        return self._run(work, [output])

    def alltoall_base(self, output, input, output_splits, input_splits, opts):
        def work():
            splits = list(input_splits) or [input.shape[0] // self.size()] * self.size()
            received, _ = collectives.alltoall(self._group, "torch.alltoall", input, splits)
            output.copy_(received.view_as(output))
        return self._run(work, [output])

    def alltoall(self, outputs, inputs, opts):
        def work():
            flat = torch.cat([t.reshape(-1) for t in inputs])
            splits = [t.numel() for t in inputs]
            received, _ = collectives.alltoall(self._group, "torch.alltoall", flat, splits)
            at = 0
            for out in outputs:
                out.copy_(received[at:at + out.numel()].view_as(out))
                at += out.numel()
        return self._run(work, outputs)

    def barrier(self, opts=None):
        return self._run(lambda: collectives.barrier(self._group), [])

    def send(self, tensors, dst, tag):
        raise RuntimeError("smb backend: send/recv (point to point) is not supported; use a collective")

    def recv(self, tensors, src, tag):
        raise RuntimeError("smb backend: send/recv (point to point) is not supported; use a collective")

    def recv_anysource(self, tensors, tag):
        raise RuntimeError("smb backend: send/recv (point to point) is not supported; use a collective")


def _create(store, rank, size, timeout):
    return FabricProcessGroup(store, rank, size, timeout)


def register():
    """Registers the backend with torch.distributed (done by `import smb.torch`)."""
    if not hasattr(dist.Backend, BACKEND.upper()):
        # torch 2 asks which devices a backend serves (and warns on every rank
        # when not told); torch 1.13 has no such argument.
        if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
            dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "cuda"])
        else:
            dist.Backend.register_backend(BACKEND, _create)
