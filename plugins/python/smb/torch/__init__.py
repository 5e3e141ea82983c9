"""smb.torch: Horovod's torch API over the Soft Memory Box fabric.

A Horovod script runs on the fabric with one line changed::

    import smb.torch as hvd        # was: import horovod.torch as hvd
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

Every collective moves through buffers in the memory servers (write your
part, server-side reduce, notified wait, read): no MPI, gloo or NCCL
connection between ranks. Launch with mpirun, torchrun, Slurm or smbrun.

Additions Horovod does not have: DistributedOptimizer(mode="seasgd" |
"downpour" | "sync", tau=, alpha=) for ETRI's hybrid training,
push_pull(), Compression.bf16, fabric_allreduce_hook for DDP, and the
torch.distributed backend "smb" (init_process_group("smb"), see
smb.torch.distributed).
"""

from smb.collective.basics import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,
                                  gloo_enabled, init, is_homogeneous, is_initialized, local_rank, local_size,
                                  mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built,
                                  shutdown, size)
from smb.collective.fabric import HorovodInternalError
from smb.collective.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from smb.collective.timeline import start_timeline, stop_timeline

from . import compression, elastic, functions, optimizer, sync_batch_norm
from . import ops as mpi_ops
from .compression import Compression
from .ddp import fabric_allreduce_hook
from .functions import allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters
from .ops import (Adasum, Average, Max, Min, Product, Sum, allgather, allgather_async, allreduce, allreduce_,
                  allreduce_async, allreduce_async_, alltoall, alltoall_async, barrier, broadcast, broadcast_,
                  broadcast_async, broadcast_async_, grouped_allgather, grouped_allgather_async, grouped_allreduce,
                  grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_, grouped_reducescatter,
                  grouped_reducescatter_async, join, poll, reducescatter, reducescatter_async,
                  sparse_allreduce_async, synchronize)
from .optimizer import DistributedOptimizer
from .sync_batch_norm import SyncBatchNorm

try:  # torch.distributed backend "smb" (torch >= 1.13 can take a Python ProcessGroup)
    from . import distributed as _distributed
    _distributed.register()
except (ImportError, AttributeError) as _e:  # pragma: no cover - older torch
    import logging as _logging
    _logging.getLogger("smb.torch").debug("torch.distributed backend 'smb' not registered: %s", _e)


def push_pull(tensor, average=True, name=None, process_set=global_process_set):
    """BytePS's spelling: push this rank's tensor to the servers, which sum
    it with everyone's, and pull the result (averaged unless average=False)."""
    return allreduce(tensor, name=name, op=Average if average else Sum, process_set=process_set)


def push_pull_async(tensor, average=True, name=None, process_set=global_process_set):
    return allreduce_async(tensor, name=name, op=Average if average else Sum, process_set=process_set)
