"""smb: the Soft Memory Box parameter-exchange fabric, from Python.

Named buffers striped over memory servers (``smbd``), moved with one-sided
RDMA or shared memory. Any object with the buffer protocol or DLPack --
bytes, bytearray, memoryview, numpy arrays, CPU torch tensors -- is read
and written in place, without a copy, and the GIL is released during every
transfer and wait::

    import numpy as np, smb
    client = smb.Client()                      # servers from $SMB_SERVERS
    w = client.create("weights", 4 << 20)      # striped over all servers
    w.write(0, np.arange(1 << 20, dtype=np.float32))
    out = np.empty(1 << 20, dtype=np.float32)
    w.read(0, out)
    w.apply("accumulate", x=np.ones(1 << 20, np.float32))  # the servers add

Failures raise :class:`smb.Error` subclasses (see :mod:`smb.errors`).
Framework layers: :mod:`smb.torch` (Horovod's API over the fabric).
"""

import operator
import os

from . import _core
from .errors import (AlreadyExists, CapacityExhausted, Error, InternalError, InvalidArgument, NotFound,
                     OutOfRange, ProtocolError, ServerGone, Timeout, TransportError, Unreachable, DataLost,
                     PermissionDenied, Busy, OutOfOrder)

__all__ = [
    "TRANSPORTS", "__version__", "Client", "Buffer", "Lock", "MemoryRegistration", "UpdateEngine", "DTYPES", "OPS", "dtype_name",
    "element_size", "memory_address", "Error", "InvalidArgument", "OutOfRange", "NotFound", "AlreadyExists",
    "CapacityExhausted", "Unreachable", "ServerGone", "Timeout", "ProtocolError", "TransportError",
    "InternalError", "DataLost", "PermissionDenied", "Busy", "OutOfOrder", "read_checkpoint", "make_credential",
]

__version__ = _core.VERSION
#: The data transports this build of libsmb has (smb/config.h), e.g. ("ucx", "verbs").
TRANSPORTS = tuple(_core.TRANSPORTS.split(","))

#: Element types of server-side vector ops, by their smb names.
DTYPES = ("f32", "f64", "f16", "bf16", "u8", "i8", "i16", "i32", "i64")
#: Server-side vector ops: y = op(y, x[, alpha]) on a buffer region.
OPS = ("accumulate", "axpy", "scale", "copy", "min", "max", "product")

_SIZES = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2, "u8": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8}
_ALIASES = {
    "float32": "f32", "float": "f32", "float64": "f64", "double": "f64", "float16": "f16", "half": "f16",
    "bfloat16": "bf16", "uint8": "u8", "bool": "u8", "int8": "i8", "int16": "i16", "short": "i16",
    "int32": "i32", "int": "i32", "int64": "i64", "long": "i64",
}


def dtype_name(dtype):
    """The smb name of an element type: an smb name ("f32"), a numpy dtype or
    type (np.float32), or a torch dtype (torch.float32)."""
    if isinstance(dtype, str):
        name = dtype
    elif hasattr(dtype, "is_floating_point") or type(dtype).__module__ == "torch":
        name = str(dtype).replace("torch.", "")  # torch.float32 -> float32
    elif hasattr(dtype, "name") and isinstance(dtype.name, str):
        name = dtype.name  # numpy dtype
    elif hasattr(dtype, "__name__"):
        name = dtype.__name__  # numpy scalar type
    else:
        raise InvalidArgument(f"not an element type: {dtype!r}", "invalid_argument")
    name = _ALIASES.get(name, name)
    if name not in _SIZES:
        raise InvalidArgument(f"element type {dtype!r} has no smb equivalent (smb has {', '.join(DTYPES)})",
                              "invalid_argument")
    return name


def element_size(dtype):
    """Bytes per element of `dtype` (any spelling dtype_name accepts)."""
    return _SIZES[dtype_name(dtype)]


def memory_address(obj):
    """The address smb uses for `obj`'s bytes: the object's own data pointer
    (numpy's ``arr.ctypes.data``, torch's ``t.data_ptr()``), as nothing is copied."""
    return _core.memory_address(obj)


def read_checkpoint(path):
    """Verifies a checkpoint file whole (header, length, checksum) and returns what it holds
    (name, size, stripe_unit, version, checksum); raises InvalidArgument for a damaged file."""
    return _core.read_checkpoint(os.fspath(path))


def make_credential(secret_file, prefix, lifetime_s=24 * 3600):
    """The text (JSON) of a per-job credential: it opens only the buffers
    whose names start with `prefix`, for `lifetime_s` seconds, and is derived
    from the servers' shared secret in `secret_file` (no server is asked).
    Give it to a client as its auth_token_file (SMB_AUTH_TOKEN_FILE); write
    it readable by its owner only."""
    return _core.make_credential(os.fspath(secret_file), prefix, float(lifetime_s))


def _servers(servers):
    if servers is None:
        return []
    if isinstance(servers, str):
        return [s.strip() for s in servers.split(",") if s.strip()]
    return list(servers)


class Lock:
    """A held lock (Client.lock); a context manager. Released by unlock(), on
    leaving the ``with`` block, if the holder dies, or when its lease runs out."""

    def __init__(self, core):
        self._lock = core

    @property
    def held(self):
        return self._lock.held

    def unlock(self):
        self._lock.unlock()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._lock.held:
            self._lock.unlock()


class MemoryRegistration:
    """Memory registered for zero-copy transfers (Client.register_memory);
    keeps the object alive. A context manager; unregister() ends it."""

    def __init__(self, core):
        self._registration = core

    @property
    def valid(self):
        return self._registration.valid

    def unregister(self):
        self._registration.unregister()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.unregister()


class Buffer:
    """A named buffer striped over memory servers (Client.create / open)."""

    def __init__(self, client, core):
        self._client = client  # the client outlives its buffers
        self._b = core

    name = property(lambda self: self._b.name)
    size = property(lambda self: self._b.size)
    layout = property(lambda self: self._b.layout)

    def write(self, offset, data):
        """Writes `data` (buffer protocol or DLPack) at byte `offset`; visible
        to every client once it returns."""
        self._b.write(offset, data)

    def read(self, offset, out=None, size=None):
        """Reads into `out` (writable, contiguous) and returns it; without
        `out`, reads `size` bytes (default: to the end) into a new bytearray."""
        if out is None:
            # max(0, ...): an offset past the end must reach libsmb and raise
            # smb.OutOfRange naming the buffer, not bytearray's "negative count".
            out = bytearray(max(0, self.size - offset) if size is None else size)
        self._b.read(offset, out)
        return out

    def write_async(self, offset, data):
        """Starts a write; returns a request with .wait(timeout=None) and .done().
        `data` is kept alive until the request completes."""
        return self._b.write_async(offset, data)

    def read_async(self, offset, out):
        """Starts a read into `out`; returns a request (see write_async)."""
        return self._b.read_async(offset, out)

    def fetch_add(self, offset, value):
        """Atomically adds `value` to the 64-bit word at `offset`; returns the old
        value (unsigned). A negative `value` subtracts (modulo 2**64)."""
        return self._b.fetch_add(offset, _word(value, "fetch_add: value"))

    def compare_swap(self, offset, expected, desired):
        """Atomically sets the 64-bit word at `offset` to `desired` if it is
        `expected`; returns the old value (unsigned; negative arguments are
        taken modulo 2**64)."""
        return self._b.compare_swap(offset, _word(expected, "compare_swap: expected"),
                                    _word(desired, "compare_swap: desired"))

    def apply(self, op, dtype=None, offset=0, x=None, count=None, alpha=1.0):
        """A server-side vector op on `count` elements at byte `offset`:
        y = op(y, x) with x sent from `x` (none for "scale"). dtype and count
        default to x's element type and length."""
        if dtype is None:
            if x is None:
                raise InvalidArgument("apply: give dtype (there is no x to take it from)", "invalid_argument")
            dtype = _core.memory_dtype(x)
            if dtype is None:
                raise InvalidArgument("apply: give dtype; x's element type is not one of smb's", "invalid_argument")
        dtype = dtype_name(dtype)
        if count is None:
            if x is None:
                raise InvalidArgument("apply: give count (there is no x to take it from)", "invalid_argument")
            count = _nbytes(x) // _SIZES[dtype]
        self._b.apply(op, dtype, offset, count, float(alpha), x)

    def apply_from(self, op, source, dtype, offset=0, count=None, source_offset=0, alpha=1.0):
        """A server-side vector op with x in another buffer `source` at
        `source_offset` (e.g. a worker's delta area), striped like this one."""
        dtype = dtype_name(dtype)
        if count is None:
            count = (self.size - offset) // _SIZES[dtype]
        self._b.apply_from(op, dtype, offset, count, float(alpha), source._b, source_offset)

    def version(self):
        """The buffer's version: advanced by every vector op over it."""
        return self._b.version()

    def wait_version(self, version, timeout=15.0):
        """Waits (notified by the servers, no polling) until version() >=
        `version`; returns the version reached or raises smb.Timeout."""
        return self._b.wait_version(version, timeout)

    def close(self):
        """Releases this handle on every server."""
        self._b.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"smb.Buffer(name={self.name!r}, size={self.size})"


def _word(value, what):
    """`value` as the unsigned 64-bit word libsmb takes. The binding's uint64
    refuses negative ints with a bare TypeError, yet fetch_add(off, -1) is the
    natural way to decrement: take -2**63..2**64-1 modulo 2**64, refuse others."""
    value = operator.index(value)  # ints (numpy's too), not floats
    if not -(1 << 63) <= value < (1 << 64):
        raise InvalidArgument(f"{what} {value} does not fit in a 64-bit word", "invalid_argument")
    return value & ((1 << 64) - 1)


def _nbytes(x):
    nbytes = getattr(x, "nbytes", None)
    if nbytes is not None:
        return int(nbytes)
    if hasattr(x, "element_size") and hasattr(x, "numel"):  # torch.Tensor
        return x.element_size() * x.numel()
    return memoryview(x).nbytes


class Client:
    """A connection to the fabric's memory servers.

    servers: "h:p,h:p", a list, or None for $SMB_SERVERS. timeout: the longest
    single wait, in seconds. transport: one of smb.TRANSPORTS, e.g. "ucx" or
    "verbs" (None: $SMB_TRANSPORT, else "ucx"). transport_options: settings
    only that transport knows, e.g. {"protocol": "am"} for UCX. auth_token_file:
    the secret of servers run with --auth-token-file (None: $SMB_AUTH_TOKEN_FILE,
    if set); without the right one, connecting raises PermissionDenied."""

    def __init__(self, servers=None, timeout=15.0, transport=None, transport_options=None, auth_token_file=None):
        self._c = _core.Client(_servers(servers), float(timeout), transport or "",
                               {str(k): str(v) for k, v in (transport_options or {}).items()},
                               os.fspath(auth_token_file) if auth_token_file is not None else "")

    @property
    def servers(self):
        return list(self._c.servers)

    def create(self, name, size, stripe_unit=1 << 20, servers=None, replicas=1):
        """Creates buffer `name` of `size` bytes, striped over `servers` (default: all), with
        `replicas` copies of each stripe on distinct servers (1 to 3; 2 survives the loss of a server, 3 of two)."""
        return Buffer(self, self._c.create(name, size, stripe_unit, _servers(servers), replicas))

    def open(self, name):
        return Buffer(self, self._c.open(name))

    def open_or_create(self, name, size, stripe_unit=1 << 20, servers=None, replicas=1):
        """Opens `name`, or creates it if nobody has (race-free between processes)."""
        return Buffer(self, self._c.open_or_create(name, size, stripe_unit, _servers(servers), replicas))

    def destroy(self, name):
        self._c.destroy(name)

    def save(self, name, path):
        """Writes a consistent snapshot of buffer `name` to the file `path` (a checkpoint);
        returns its CheckpointInfo. The file appears only once whole."""
        return self._c.save(name, os.fspath(path))

    def load(self, path, name=None, stripe_unit=None, servers=None):
        """Restores a checkpoint into a new buffer (`name`, default the saved one) and returns
        it. The file is verified whole first: a damaged file or a taken name raises and
        changes nothing. Placement: `servers` (default all) and `stripe_unit` (default the saved one)."""
        return Buffer(self, self._c.load(os.fspath(path), name or "", stripe_unit or 0, _servers(servers)))

    def lock(self, name, offset=0, length=None, lease=30.0, timeout=60.0):
        """A lock on `name` (optionally a byte range); use as ``with client.lock(name):``."""
        return Lock(self._c.lock(name, offset, (1 << 64) - 1 if length is None else length, float(lease),
                                 float(timeout)))

    def barrier(self, name, parties, timeout=120.0):
        """Returns once `parties` processes have called barrier(name)."""
        self._c.barrier(name, parties, float(timeout))

    def status(self):
        return self._c.status()

    def list(self):
        return self._c.list()

    def info(self, name):
        return self._c.info(name)

    def repair(self, name):
        """Rebuilds the copies of replicated buffer `name` that a restarted server lost, from
        the other copies, while clients that have it open go on (their writes pause only for
        the final pass); returns a RepairReport (repaired copies, bytes, recopied,
        clients_paused, paused_seconds, seconds). Raises Busy when another repair of it runs
        or a client holding it did not pause in time, DataLost when both copies of some
        stripes are gone."""
        return self._c.repair(name)

    def replace_server(self, lost, replacement):
        """Replaces server `lost` (as the fabric lists it), gone for good, by the new empty smbd
        at `replacement`: every client reaches its place there from now on, and the next
        repair() of each replicated buffer rebuilds its copies there. Raises InvalidArgument
        (nothing changed) where `lost` still answers or `replacement` does not. Returns the
        servers told."""
        return list(self._c.replace_server(lost, replacement))

    def replaced_servers(self):
        """{lost server: the address it is served at now}."""
        return dict(self._c.replaced_servers())

    def unreachable_servers(self):
        """{server: reason} of the servers found unreachable so far (a replicated
        buffer works on without them; what needs them fails at once)."""
        return dict(self._c.unreachable_servers())

    def describe_paths(self):
        return self._c.describe_paths()

    def register_memory(self, memory):
        """Registers `memory` (pinned) for zero-copy transfers where the transport can."""
        return MemoryRegistration(self._c.register_memory(memory))


class UpdateEngine:
    """The C++ update engine (include/smb/update_engine.hpp) over a flat
    float32 parameter vector: groups average every step, group roots
    exchange with global weights in the fabric every `tau` steps.

    mode: "seasgd" (elastic averaging), "downpour" or "sync".
    group_servers: "host:port" servers for the group's own buffers and
    barriers, e.g. an smbd on the group's node (None: the client's).
    group_transport: the transport to those servers, e.g. "ucx" for shared
    memory on the node while the fabric runs on "tcp" (None:
    $SMB_GROUP_TRANSPORT, else the client's default).
    resume_from: a checkpoint (save_checkpoint) to start the global weights,
    and so every worker, from instead of the first worker's parameters."""

    def __init__(self, client, name, parameters, mode="seasgd", groups=1, group=0, group_size=1, group_rank=0,
                 alpha=0.2, tau=1, timeout=120.0, cuda_device=-1, group_servers=None, resume_from=None,
                 group_transport=None):
        self._client = client
        self._e = _core.UpdateEngine(client._c, name, parameters, groups, group, group_size, group_rank, mode,
                                     float(alpha), tau, float(timeout), cuda_device,
                                     _servers(group_servers) if group_servers else [],
                                     os.fspath(resume_from) if resume_from else "", group_transport or "")

    def initialize(self, params):
        """Collective: the first worker's params become everyone's."""
        self._e.initialize(params)

    def allreduce(self, grads):
        """Averages grads over the group, in place."""
        self._e.allreduce(grads)

    def after_step(self, params):
        """After the optimizer step: every tau steps, the exchange with the global weights."""
        self._e.after_step(params)

    def global_weights(self, out):
        """The global weights into `out`: host memory, or device memory of a GPU engine."""
        self._e.global_weights(out)

    def save_checkpoint(self, path):
        """Writes the global weights, at one version, to a checkpoint file (resume with resume_from)."""
        return self._e.save_checkpoint(os.fspath(path))
