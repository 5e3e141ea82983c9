"""Horovod's elastic state objects, kept in the fabric.

commit() writes the state into the job's commit store (smb.collective.
commits): every member writes its share of the tensors, only those that
changed since it last wrote that slot (torch's version counter says so),
and the commit counts once every member's share is in. restore() reads
the last commit back, so a worker that joins, or every worker after a
relaunch, starts from the fabric and not from a peer.

Horovod keeps each rank's last commit in its own memory and broadcasts
rank 0's at sync(); here the commit is one copy in the servers, made of
every member's share. Synchronous data-parallel training keeps the
members' tensors equal; where they are not (BatchNorm's running
statistics), each tensor comes from the member that wrote it.

A tensor changed in place through `.data` does not move torch's version
counter: set SMB_ELASTIC_DELTA=0 to write every tensor at every commit.
"""

import io
import json
import logging
import os
import pickle

import torch

from smb.collective import basics
from smb.collective.fabric import HorovodInternalError

log = logging.getLogger("smb.torch.elastic")


class HostsUpdatedInterrupt(RuntimeError):
    """Workers were added to or removed from the job: every member raises it
    at the same commit, and hvd.elastic.run forms the job again. skip_sync
    is False: new members read the state from the fabric."""

    def __init__(self, skip_sync=False):
        super().__init__("the job's workers changed")
        self.skip_sync = skip_sync


class _TensorRef:
    """A tensor's place in the committed tensor list (inside the pickled skeleton)."""

    def __init__(self, index):
        self.index = index


def _flatten(tree, tensors, path):
    """`tree` with every tensor replaced by a _TensorRef (appended to `tensors`)."""
    if isinstance(tree, torch.Tensor):
        tensors.append((path, tree))
        return _TensorRef(len(tensors) - 1)
    if isinstance(tree, dict):
        return type(tree)((k, _flatten(v, tensors, f"{path}/{k}")) for k, v in tree.items())
    if isinstance(tree, (list, tuple)):
        items = [_flatten(v, tensors, f"{path}/{i}") for i, v in enumerate(tree)]
        return type(tree)(items) if not hasattr(tree, "_fields") else type(tree)(*items)
    return tree


def _unflatten(tree, tensors):
    if isinstance(tree, _TensorRef):
        return tensors[tree.index]
    if isinstance(tree, dict):
        return type(tree)((k, _unflatten(v, tensors)) for k, v in tree.items())
    if isinstance(tree, (list, tuple)):
        items = [_unflatten(v, tensors) for v in tree]
        return type(tree)(items) if not hasattr(tree, "_fields") else type(tree)(*items)
    return tree


def _bytes_of(t):
    """A tensor's bytes as flat uint8 NumPy (a view for contiguous CPU tensors)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous().reshape(-1)
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t.view(torch.uint8).numpy()


def _tensor_from(spec, data):
    dtype = getattr(torch, spec.dtype.replace("torch.", ""))
    flat = torch.from_numpy(data)
    if dtype == torch.bool:
        return flat.to(torch.bool).reshape(spec.shape)
    return flat.view(dtype).reshape(spec.shape) if data.size else torch.empty(spec.shape, dtype=dtype)


class State:
    """Horovod's elastic State: commit(), restore(), sync(), reset callbacks."""

    def __init__(self):
        self._reset_callbacks = []
        self._at_seq = None  # the commit this member's state equals (None: unknown)

    # -- Horovod's API

    def register_reset_callbacks(self, callbacks):
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):  # Horovod's listener hook: the fabric tells us instead
        pass

    def commit(self):
        """Writes the state into the fabric (every member calls it together),
        then raises HostsUpdatedInterrupt if workers joined or left."""
        agreed = self._write()
        if agreed > _job().round.number:
            raise HostsUpdatedInterrupt(skip_sync=False)

    def save(self):
        """The commit's write, without the check for new workers."""
        self._write()

    def restore(self):
        """The state of the last commit in the fabric."""
        snapshot = _job().commits.restore()
        if snapshot is None:
            raise HorovodInternalError("elastic restore: nothing was committed yet")
        self._apply(snapshot)
        self._at_seq = snapshot.seq

    def sync(self):
        """Every member at the fabric's last commit: the first one is made of
        member 0's state; a member that is at it already reads nothing."""
        store = _job().commits
        head = store.head()
        if head.seq == 0:
            self._write(writers=1)
            if basics.rank() != 0:
                self.restore()
        elif self._at_seq != head.seq:
            self.restore()
        else:
            store.seq = head.seq

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every member if workers joined or
        left since this round formed (the members agree by a max-allreduce
        of the newest round each saw)."""
        from smb.torch import ops
        seen = torch.tensor([_job().latest()], dtype=torch.int64)
        newest = int(ops.allreduce(seen, op=ops.Max, name="elastic.check_host_updates").item())
        if newest > _job().round.number:
            self._at_seq = None  # what changed since the last commit is not in the fabric
            raise HostsUpdatedInterrupt(skip_sync=False)

    def reset(self):
        """Called by hvd.elastic.run on every member each time the job forms
        (the first time included): what must agree across the new members."""

    # -- what subclasses provide

    def _gather(self):
        """(skeleton, [(path, tensor)]) of everything the state holds."""
        raise NotImplementedError

    def _apply_tree(self, tree):
        raise NotImplementedError

    # -- the fabric

    def _write(self, writers=None):
        from smb.collective.commits import Spec
        rt = basics.state()
        job = _job()
        skeleton, tensors = self._gather()
        delta = os.environ.get("SMB_ELASTIC_DELTA", "1") not in ("0", "")
        specs, arrays, keys = [], [], []
        for path, t in tensors:
            specs.append(Spec(path, str(t.dtype), list(t.shape), t.numel() * t.element_size()))
            keys.append((t.data_ptr(), t._version, t.device.type) if delta else None)
            arrays.append(_bytes_of(t) if t.device.type == "cpu" else (lambda t=t: _bytes_of(t)))
        blob = summary = b""
        if rt.rank == 0:
            out = io.BytesIO()
            pickle.dump(skeleton, out, protocol=pickle.HIGHEST_PROTOCOL)
            blob = out.getvalue()
            summary = self._summary()
        seq, agreed = job.commits.commit(specs, arrays, keys, blob, _waiter(rt), job.latest(), writers=writers,
                                         summary=summary)
        self._at_seq = seq
        return agreed

    def _summary(self):
        """The state's plain number fields (epoch, batch, ...) as JSON: what
        smbrun --resume prints of the commit it resumes from."""
        fields = {k: v for k, v in getattr(self, "_objects", dict)().items()
                  if isinstance(v, (int, float)) and not isinstance(v, bool)}
        return json.dumps(fields, separators=(",", ":")).encode()

    def _apply(self, snapshot):
        tensors = [_tensor_from(spec, data) for spec, data in zip(snapshot.specs, snapshot.arrays)]
        tree = pickle.loads(snapshot.blob)
        self._apply_tree(_unflatten(tree, tensors))


class ObjectState(State):
    """Horovod's ObjectState: the keyword arguments become attributes, and
    their values are what commit() keeps (pickled; tensors among them are
    kept as tensors)."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        super().__init__()
        self._saved_names = list(kwargs)
        for name, value in kwargs.items():
            setattr(self, name, value)

    def _objects(self):
        return {name: getattr(self, name) for name in self._saved_names}

    def _gather(self):
        tensors = []
        return _flatten({"objects": self._objects()}, tensors, "objects"), tensors

    def _apply_tree(self, tree):
        for name, value in tree["objects"].items():
            setattr(self, name, value)


class TorchState(ObjectState):
    """Horovod's TorchState: a model, an optimizer, ElasticSamplers and any
    other keyword arguments (state.epoch, state.batch, ...)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        from .sampler import ElasticSampler
        self.model = model
        self.optimizer = optimizer
        self._samplers = {k: v for k, v in kwargs.items() if isinstance(v, ElasticSampler)}
        objects = {k: v for k, v in kwargs.items() if k not in self._samplers}
        super().__init__(**objects)
        for name, sampler in self._samplers.items():
            setattr(self, name, sampler)

    def _gather(self):
        tensors = []
        tree = {"objects": self._objects(),
                "samplers": {name: s.state_dict() for name, s in self._samplers.items()}}
        if self.model is not None:
            tree["model"] = self.model.state_dict()
        if self.optimizer is not None:
            tree["optimizer"] = self.optimizer.state_dict()
        return _flatten(tree, tensors, "state"), tensors

    def _apply_tree(self, tree):
        super()._apply_tree(tree)
        if self.model is not None and "model" in tree:
            self.model.load_state_dict(tree["model"])
        if self.optimizer is not None and "optimizer" in tree:
            self.optimizer.load_state_dict(tree["optimizer"])
        for name, s in self._samplers.items():
            if name in tree.get("samplers", {}):
                s.load_state_dict(tree["samplers"][name])

    def reset(self):
        for s in self._samplers.values():
            s.reset()
        if hasattr(self.optimizer, "_agree_on_buckets"):
            self.optimizer._agree_on_buckets()


def _job():
    rt = basics.state()
    if rt.elastic is None:
        raise HorovodInternalError("hvd.elastic needs an elastic job: launch with smbrun --min-np/--max-np "
                                   "(or --host-discovery-script)")
    return rt.elastic


def _waiter(rt):
    """The commit's wait for every member (basics.State.wait_version: fails
    at once when smbrun reports a member gone)."""
    return lambda counter, target: rt.wait_version(counter, target, "elastic commit")
