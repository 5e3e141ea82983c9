"""broadcast_parameters, broadcast_optimizer_state, broadcast_object and
allgather_object, with Horovod's semantics, over smb.torch's collectives."""

import collections
import io

import torch

from smb.collective import basics
from smb.collective.process_sets import global_process_set

from .ops import allgather, broadcast_, broadcast_async_, synchronize

try:  # pickles lambdas and local classes too, where Debian has it
    import cloudpickle as _pickle
except ImportError:  # pragma: no cover - plain pickle covers ordinary objects
    import pickle as _pickle


def broadcast_parameters(params, root_rank):
    """Overwrites every rank's tensors with the root's, in place: `params` is
    a dict (a state_dict) or a list of (name, tensor) or tensors."""
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, list):
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))
    handles = [broadcast_async_(p, root_rank, name) for name, p in params if p is not None]
    for h in handles:
        synchronize(h)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """The root's `obj` on every rank (pickled; the root gets its own object back)."""
    name = name or type(obj).__name__
    me = basics.rank()
    if me == root_rank:
        data = io.BytesIO()
        _pickle.dump(obj, data)
        payload = torch.frombuffer(bytearray(data.getvalue()), dtype=torch.uint8)
        size = torch.tensor([payload.numel()], dtype=torch.int32)
    else:
        size = torch.tensor([0], dtype=torch.int32)
    broadcast_(size, root_rank, name=name + ".sz", process_set=process_set)
    if me != root_rank:
        payload = torch.empty(int(size[0]), dtype=torch.uint8)
    broadcast_(payload, root_rank, name=name + ".t", process_set=process_set)
    if me == root_rank:
        return obj
    return _pickle.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None):
    """Every rank's `obj`, in rank order (copies, this rank's too)."""
    name = name or type(obj).__name__
    data = io.BytesIO()
    _pickle.dump(obj, data)
    payload = torch.frombuffer(bytearray(data.getvalue()), dtype=torch.uint8)
    sizes = allgather(torch.tensor([payload.numel()], dtype=torch.int32), name=name + ".sz")
    gathered = allgather(payload, name=name + ".t")
    out, at = [], 0
    for n in sizes.tolist():
        out.append(_pickle.loads(gathered[at:at + n].numpy().tobytes()))
        at += n
    return out


def broadcast_optimizer_state(optimizer, root_rank, model=None):
    """The root's optimizer state (tensors in place, scalars such as lr and
    momentum by value, types kept) on every rank."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    state_dict = optimizer.state_dict()
    if len(state_dict["state"]) == 0:
        _initialize_state(optimizer, model)
        state_dict = optimizer.state_dict()
        if len(state_dict["state"]) == 0:
            return  # a stateless optimizer: nothing but its options

    params, scalars, callbacks = [], {}, {}
    occurrences = collections.defaultdict(int)

    def setter(group_index, key):
        def apply(value):
            optimizer.param_groups[group_index][key] = value
        return apply

    def state_setter(pid, key):
        def apply(value):
            state_dict["state"][pid][key] = value
        return apply

    for i, group in enumerate(state_dict["param_groups"]):
        for key, value in group.items():
            if key != "params":
                scalars[f"{key}.{i}"] = value
                callbacks[f"{key}.{i}"] = setter(i, key)
        for pid in group["params"]:
            if pid not in state_dict["state"]:
                continue
            for key, value in state_dict["state"][pid].items():
                occurrences[key] += 1
                label = f"{key}.{occurrences[key]}"
                if torch.is_tensor(value):
                    params.append((label, value))
                else:
                    scalars[label] = value
                    callbacks[label] = state_setter(pid, key)

    broadcast_parameters(params, root_rank)
    scalars = broadcast_object(scalars, root_rank)
    for label, value in scalars.items():
        callbacks[label](value)


def _initialize_state(optimizer, model):
    """A fresh optimizer has no state to send: take one step with zero
    gradients (as Horovod does) so that every rank has the same buffers."""
    sparse = set()
    if model is not None:
        for module in model.modules():
            if isinstance(module, torch.nn.Embedding) and module.sparse:
                sparse.update(id(p) for p in module.parameters())
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad and p.grad is None:
                grad = torch.zeros_like(p)
                if isinstance(optimizer, torch.optim.SparseAdam) or id(p) in sparse:
                    grad = grad.to_sparse()
                p.grad = grad
    base = optimizer.__class__.__mro__[1] if getattr(optimizer, "_smb_distributed", False) else type(optimizer)
    base.step(optimizer)
