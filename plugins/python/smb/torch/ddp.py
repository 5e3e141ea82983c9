"""A DDP communication hook that sends gradient buckets through the fabric:
    model.register_comm_hook(state=None, hook=smb.torch.fabric_allreduce_hook)
An unchanged DDP script then averages its gradients in the memory servers
(write, server-side accumulate, notified wait, read) instead of gloo's
ring. DDP itself still needs torch.distributed initialized (for its
parameter broadcast at construction); smb.torch.init() must run too.
"""

import torch

from smb.collective import handles

from . import ops


def fabric_allreduce_hook(state, bucket):
    """Averages `bucket` over all ranks through the fabric; returns a Future
    of the averaged tensor, as DDP's hooks do."""
    tensor = bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()
    index = bucket.index() if hasattr(bucket, "index") else 0
    future = torch.futures.Future()
    handle = ops.allreduce_async_(tensor, name=f"ddp.bucket.{index}", op=ops.Average)
    pending = handles._handles[handle].future

    def done(_):
        try:
            future.set_result(ops.synchronize(handle))
        except Exception as e:  # noqa: BLE001 - handed to DDP through the future
            future.set_exception(e)

    pending.add_done_callback(done)
    return future
