"""Collectives through the fabric: the engine under smb.torch's Horovod API.

Every collective is matched across ranks by its name (Horovod's rule):
the k-th use of a name on one rank meets the k-th use on every other rank
of the process set. For each (process set, name) the fabric holds:

  ctl    a small buffer per name: the arrival board (smb._core.ArrivalBoard,
         plugins/collective/arrival_board.hpp has the layout), then one
         slot per rank (the op, dtype, shape, root, splits... as JSON, and
         up to inline_bytes of the tensor itself), twice: generations
         alternate between the two sets of slots, so a rank that has moved
         on never overwrites what a slower one still reads. A rank arrives
         by writing its slot, then its arrival word, one-sided, and waits
         by reading the others' arrival words: over shared memory or RDMA
         no server CPU takes part. A rank that waited longer than
         SMB_TORCH_SPIN_US sleeps on the ctl's version, and the arrival
         that finds it asleep wakes it with one server op; where every
         rank maps the ctl (one host, shared memory), it sleeps on a futex
         there and the arrival wakes it directly. Then each rank
         reads every slot and checks them: a mismatch (shape, dtype, op,
         root) is found identically on every rank, so every rank raises the
         same error and the next collective starts clean.
  inline A small tensor travels in the slot itself, so its collective is
         two steps (arrive, read the slots) and the reduction runs on each
         rank, in C++, over the same bytes in the same order, so that every
         rank gets the same result bit for bit. Each slot carries a 64-bit
         key of its metadata: the metadata is read and compared only where
         the keys differ. This is the fixed cost of a collective.
  data   per op kind, for tensors too large to travel inline. A reduction
         uses a buffer of two result regions and one input region per
         rank, striped so that each region spreads over every server: a
         rank writes its input into its region (one-sided); the first
         participant has the servers copy it into the result region, the
         others wait for that and have the servers add (min, max, multiply)
         theirs; all wait for the version that says all W contributions
         are in, and read the result. Gathers, broadcasts and all-to-all
         read each rank's own "part" buffer (or its slot, where the part
         travelled inline).

Reuse without a second barrier: a rank arriving at generation g has
finished generation g-1, so every rank has finished generation g-2; the
regions of g-2 (results alternate by generation, parts are double
buffered) are free to reuse.

Stalls: while waiting for arrivals, every HOROVOD_STALL_CHECK_TIME_SECONDS
each waiting rank reads the slots and logs which ranks have not submitted
the collective; a rank that died is named at once (each rank holds a
fabric lock for its lifetime, released by the servers when its
connection closes), and HOROVOD_STALL_SHUTDOWN_TIME_SECONDS turns a stall
into an error.
"""

import hashlib
import json
import logging
import os
import re
import struct
import threading
import time

import smb
from smb import _core

from . import timeline

log = logging.getLogger("smb.torch")

# Element types smb can reduce on the servers, by torch dtype name.
REDUCIBLE = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "uint8": "u8",
             "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64"}
_SERVER_OP = {"sum": "accumulate", "min": "min", "max": "max", "product": "product"}
_NAME_OK = re.compile(r"[^A-Za-z0-9._:/@+\-_]")


# How long a rank polls the arrival words before it sleeps on the version:
# long enough for ranks that each have a core, short enough to leave the
# CPU to the others where ranks outnumber cores.
_SPIN_S = float(os.environ.get("SMB_TORCH_SPIN_US", "50")) / 1e6
_FIRST_SLICE_S = 0.005  # short at first, so that a join is noticed quickly


class HorovodInternalError(RuntimeError):
    """A collective failed (Horovod's name: scripts catch it)."""


class CollectiveError(HorovodInternalError):
    """Ranks disagree about a collective (shapes, dtypes, op, root); every
    rank of the process set raises it for the same collective."""


class RankGone(HorovodInternalError):
    """A rank of the process set died while others waited for it."""


def buffer_name(*parts):
    """A fabric buffer name from free-form parts: invalid characters become
    '_', and long or rewritten names get a hash so that they stay distinct.
    At most 153 characters: the servers take 200, and callers append
    suffixes such as "/part-<rank>-<parity>-<capacity>"."""
    raw = "/".join(str(p) for p in parts)
    clean = _NAME_OK.sub("_", raw)
    if clean != raw or len(clean) > 160:
        digest = hashlib.blake2s(raw.encode(), digest_size=6).hexdigest()
        # '@', not '~': the servers accept only [A-Za-z0-9._:/@+-_] in names.
        clean = clean[:140] + "@" + digest
    return clean


def _round_up(n, to):
    return (n + to - 1) // to * to


def inline_capacity(size):
    """Bytes of tensor a rank's arrival slot carries (the same on every rank
    of a set of `size`): 4 KiB, less for large sets, so that reading all
    slots stays one small read (64 KiB at most)."""
    return max(256, min(4096, 65536 // max(1, size) // 64 * 64))


class Striping:
    """How a reduction buffer is laid out: each region holds one tensor and
    spreads over the servers so that any op over the tensor's bytes touches
    every server of the buffer -- the buffer's version (the least over its
    servers) then counts ops exactly -- and so that regions sit a whole
    number of stripe rows apart, as apply_from requires. A small tensor
    uses fewer servers (those picked from the name's hash, to spread load)."""

    def __init__(self, nbytes, servers, key):
        nbytes = max(8, nbytes)
        count = max(1, min(len(servers), nbytes // 8))
        self.stripe_unit = _round_up(-(-nbytes // count), 8)
        count = -(-nbytes // self.stripe_unit)  # servers the tensor really reaches
        first = int(hashlib.blake2s(key.encode(), digest_size=4).hexdigest(), 16) % len(servers)
        self.servers = [servers[(first + i) % len(servers)] for i in range(count)]
        self.region = self.stripe_unit * count

    def offset(self, index):
        return index * self.region


class Stalls:
    """What the environment says about stall checks (Horovod's variables)."""

    def __init__(self):
        env = os.environ
        self.disabled = env.get("HOROVOD_STALL_CHECK_DISABLE", "0") not in ("", "0", "false", "False")
        self.check = float(env.get("HOROVOD_STALL_CHECK_TIME_SECONDS", "60"))
        shutdown = env.get("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "")
        self.shutdown = float(shutdown) if shutdown not in ("", "0") else None
        if self.shutdown is not None and self.shutdown < self.check:
            logging.getLogger("smb.torch").warning(
                "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS is less than HOROVOD_STALL_CHECK_TIME_SECONDS, will not "
                "shutdown.")
            self.shutdown = None
        # Death of a peer is checked far more often than stalls are reported.
        self.liveness = min(2.0, self.check) if not self.disabled else 2.0


class ProcessGroupState:
    """The fabric side of one process set on this rank."""

    def __init__(self, runtime, set_id, ranks):
        self.runtime = runtime
        self.set_id = set_id
        self.ranks = list(ranks)
        self.size = len(self.ranks)
        self.index = self.ranks.index(runtime.rank)  # this rank's place in the set
        self.root = self.ranks[0]
        self.namespace = buffer_name(runtime.job, f"ps{set_id}")
        self.inline_bytes = inline_capacity(self.size)
        self.slot_bytes = _round_up(320 + 24 * self.size, 64) + self.inline_bytes
        self._collectives = {}
        self._lock = threading.Lock()
        self.lanes = {}  # a plugin's per-signature fast paths (smb.torch's small allreduce): they die with the set

    def collective_names(self):
        with self._lock:
            return list(self._collectives)

    def collective(self, name):
        with self._lock:
            c = self._collectives.get(name)
            if c is None:
                c = self._collectives[name] = Collective(self, name)
            return c


class Collective:
    """One named collective of one process set, used generation after generation."""

    def __init__(self, group, name):
        self.group = group
        self.name = name
        self.generation = 0        # uses of this name so far (the same on every rank)
        rt = group.runtime
        base = buffer_name(group.namespace, name)
        self.base = base
        servers = rt.servers
        home = int(hashlib.blake2s(base.encode(), digest_size=4).hexdigest(), 16) % len(servers)
        size = _core.ArrivalBoard.slots_at(group.size) + 2 * group.size * group.slot_bytes
        self.ctl = rt.open_or_create(base + "/ctl", size, stripe_unit=_round_up(size, 64),
                                     servers=[servers[home]])
        self.board = _core.ArrivalBoard(self.ctl._b, group.size, group.index, group.slot_bytes, _SPIN_S)
        self._keys = {}       # metadata (as a tuple) -> (its 64-bit key, its JSON): built once
        self.joined = set()   # set indices of ranks that joined (join()) at this generation
        self.payloads = []    # each rank's inline payload at this generation (arrive())
        self._reductions = {}  # (dtype, bytes) -> Reduction
        self._parts = {}       # parity -> (name, smb.Buffer, capacity): this rank's part buffers
        self._peer_parts = {}  # name -> smb.Buffer: other ranks' parts

    # ------------------------------------------------------------- arrival

    def arrive(self, meta, payload=None):
        """Writes this rank's metadata (and `payload`, a small tensor's bytes:
        see inline_bytes) for the next generation, waits until every rank
        of the set has (or has joined, see joining.py), and returns all
        ranks' metadata; self.payloads then holds each rank's payload and
        self.joined the set indices of the ranks that joined instead."""
        blob = json.dumps(meta, separators=(",", ":")).encode()
        self._arrive(meta.get("op", ""), 0, blob, payload)
        return self._read_slots(self.generation)

    def _keyed(self, key_of, meta):
        """(key, JSON) of metadata that repeats call after call (an allreduce
        of one tensor), built once per `key_of` (hashable; meta() makes the
        metadata it names)."""
        entry = self._keys.get(key_of)
        if entry is None:
            blob = json.dumps(meta(), separators=(",", ":")).encode()
            key = int.from_bytes(hashlib.blake2b(blob, digest_size=8).digest(), "little") | 1
            entry = self._keys[key_of] = (key, blob)
        return entry

    def arrive_keyed(self, key_of, meta, payload):
        """An allreduce's arrive() with the metadata's key (_keyed()); returns
        the key, and reads no slots: reduce_inline() reads the payloads
        where the keys agree."""
        key, blob = self._keyed(key_of, meta)
        self._arrive("allreduce", key, blob, payload)
        return key

    def allreduce_inline(self, key_of, meta, payload, dtype, red, out):
        """A small allreduce whose reduction C++ does (ArrivalBoard::reducible; data._CXX_TYPES),
        start to end: True when `out` holds the result, False when some
        rank's metadata differs (read the slots, check() names it). Where a
        rank is late it waits as arrive() does, joins and stalls included."""
        key, blob = self._keyed(key_of, meta)
        g = self.generation + 1
        self.joined = set()
        if timeline.recording():
            with timeline.phase("NEGOTIATE_ALLREDUCE"):
                outcome = self._post(g, self.board.allreduce, key, payload, blob, dtype, red, out, _FIRST_SLICE_S)
        else:
            outcome = self._post(g, self.board.allreduce, key, payload, blob, dtype, red, out, _FIRST_SLICE_S)
        return self._inline_outcome(outcome, g, key, dtype, red, lambda: out)

    def _inline_outcome(self, outcome, g, key, dtype, red, out):
        """allreduce_inline()'s answer, given the board's outcome at g; `out`
        returns the result's bytes (uint8), called only where a rank was late."""
        if outcome == _core.ArrivalBoard.WAITING:
            with timeline.phase("NEGOTIATE_ALLREDUCE"):
                self._wait_for_everyone(g, first=False)
            return self.reduce_inline(key, dtype, red, out())
        return outcome == _core.ArrivalBoard.REDUCED

    def _arrive(self, op, key, blob, payload):
        g = self.generation + 1
        with timeline.phase("NEGOTIATE_" + str(op).upper()):
            self._post(g, self.board.post, key, payload, blob)
            self._wait_for_everyone(g)

    def _post(self, g, board_call, *args):
        """board_call(g, *args), which writes this rank's slot of generation
        g; the generation moves to g unless the board refused the slot before
        writing anything (ArrivalBoard::write_slot: it does not fit), so the
        collective goes on with a call that fits."""
        try:
            result = board_call(g, *args)
        except smb.InvalidArgument as e:
            raise CollectiveError(f"collective '{self.name}': {e}") from e
        except BaseException:
            self.generation = g  # posted, or maybe: the next call is the next generation
            raise
        self.generation = g
        return result

    def reduce_inline(self, key, dtype, red, out):
        """After arrive_keyed(): the reduction of the live ranks' payloads into
        `out` (uint8), in set order on every rank. False where some slot's
        key differs (read the slots then, and name the mismatch)."""
        return self.board.reduce(self.generation, key, dtype, red, out, sorted(self.joined))

    def _wait_for_everyone(self, g, first=True):
        """Returns once every rank of the set arrived at g, or joined instead
        (then in self.joined). first=False: the first short wait is over."""
        self.joined = set()
        if first and self.board.wait(0, g, [], _FIRST_SLICE_S):
            return
        rt = self.group.runtime
        stalls = rt.stalls
        rt.raise_if_dead(self.name, self.group.ranks)
        started = time.monotonic()
        next_report = started + stalls.check
        slice_s = _FIRST_SLICE_S
        while True:
            slice_s = min(2 * slice_s, stalls.liveness)
            rt.watch(self.name)
            joined = self._joined_instead(g)
            if joined:
                missing = self._missing(g, joined)
                if not missing:
                    self.joined = joined
                    return
            elif time.monotonic() - started < stalls.liveness:
                if self.board.wait(0, g, [], slice_s):
                    return
                continue
            else:
                missing = self._missing(g)
            now = time.monotonic()
            rt.raise_if_dead(self.name, missing, probe=True)
            if not stalls.disabled and now >= next_report and missing:
                rt.report_stall(self.name, missing, now - started)
                next_report = now + stalls.check
            if stalls.shutdown is not None and now - started >= stalls.shutdown and missing:
                self._give_up(g)
                raise RankGone(f"collective '{self.name}' stalled for {int(now - started)} s waiting for rank(s) "
                               f"{missing} (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS)")
            if self.board.wait(0, g, sorted(joined), slice_s):
                self.joined = joined
                return

    def _joined_instead(self, g):
        """Set indices of the ranks that joined without arriving at g. A rank
        that arrived at g, saw it complete and joined afterwards (while this
        rank's wait timed out) takes part in g all the same."""
        joined = self.group.runtime.joined_indices(self.group)
        if not joined:
            return joined
        reached = self.board.reached(0, g)
        return {i for i in joined if reached[i] < g}

    def _give_up(self, g):
        """Marks this rank's slot of generation g as abandoned, so that a rank
        arriving late does not wait in the data phase for this one."""
        self.board.write_slot(g, 0, None, json.dumps({"aborted": True}, separators=(",", ":")).encode())

    def wait_data(self, buf, target, participants):
        """A wait of the data phase (after everyone arrived) for `buf`'s
        version: notified, and between slices it checks that no participant
        died or gave up on this generation, so that neither turns into a hang."""
        self.group.runtime.wait_until(lambda s: _version_within(buf, target, s), f"collective '{self.name}'",
                                      between=self._data_check(participants))

    def wait_done(self, participants):
        """A wait of the data phase for every participant's mark() in row 1
        (a reduction by the ranks), with wait_data()'s checks."""
        g = self.generation
        skip = [i for i in range(self.group.size) if i not in participants]
        self.group.runtime.wait_until(lambda s: self.board.wait(1, g, skip, s), f"collective '{self.name}'",
                                      between=self._data_check(participants))

    def _data_check(self, participants):
        rt = self.group.runtime
        ranks = [self.group.ranks[i] for i in participants]
        next_probe = [time.monotonic() + rt.stalls.liveness]

        def check():
            given_up = [self.group.ranks[i] for i, s in enumerate(self._slots(self.generation))
                        if s and s.get("g") == self.generation and s.get("aborted")]
            if given_up:
                raise CollectiveError(f"collective '{self.name}': rank(s) {given_up} gave up on it (stall shutdown)")
            if time.monotonic() >= next_probe[0]:
                rt.raise_if_dead(self.name, ranks, probe=True)
                next_probe[0] = time.monotonic() + rt.stalls.liveness
        return check

    def resync(self):
        """After a join: every rank is quiescent (between two barriers), and
        some sat out uses of this name. Take the name's generation from the
        arrival words, and read reduction versions afresh."""
        self.generation = max(self.board.reached(0, 0) + self.board.reached(0, 1) + [0])
        for entry in self._reductions.values():
            entry.expected = None

    def _slots(self, g, payloads=None):
        """Every rank's slot of generation g (its metadata with "g" added;
        None where never written); with a list `payloads`, also each slot's
        payload (views of one read, no copies)."""
        slot_bytes = self.group.slot_bytes
        raw = memoryview(self.ctl.read(self.board.slot_offset(g, 0), size=self.group.size * slot_bytes))
        out = []
        for i in range(self.group.size):
            at = i * slot_bytes
            generation, _key, meta_len, payload_len = struct.unpack_from("<QQII", raw, at)
            meta_at = at + 24 + _round_up(payload_len, 8)
            if generation == 0 or meta_at + meta_len > at + slot_bytes:
                out.append(None)
            else:
                out.append(dict(json.loads(bytes(raw[meta_at:meta_at + meta_len])), g=generation))
            if payloads is not None:
                payloads.append(raw[at + 24:at + 24 + payload_len] if out[-1] is not None else None)
        return out

    def _missing(self, g, joined=()):
        return [self.group.ranks[i] for i, r in enumerate(self.board.reached(0, g)) if i not in joined and r < g]

    def _read_slots(self, g):
        self.payloads = []
        slots = self._slots(g, self.payloads)
        for i, s in enumerate(slots):
            if i in self.joined:
                continue
            if s is None or s.get("g") != g:
                raise CollectiveError(f"collective '{self.name}': rank {self.group.ranks[i]} is at another use of "
                                      f"this name (generation {None if s is None else s.get('g')}, expected {g})")
            if s.get("aborted"):
                raise CollectiveError(f"collective '{self.name}': rank {self.group.ranks[i]} gave up on it "
                                      "(stall shutdown)")
        return slots

    # ------------------------------------------------------------- data

    def reduction_buffer(self, dtype, nbytes):
        """The reduction buffer for `dtype` and `nbytes` (two result regions,
        alternating with the name's generation, then one input region per
        rank). Called before
        arriving: no rank touches it between two uses, so the version read
        here (when opening, or after this rank sat out uses in join()) is
        the one every participant starts from."""
        entry = self._reductions.get((dtype, nbytes))  # looked up once: hashing and names cost per call
        if entry is None:
            rt = self.group.runtime
            striping = Striping(nbytes, sorted(rt.servers), f"{self.base}/{dtype}")
            name = f"{self.base}/red-{dtype}-{nbytes}"
            size = striping.region * (2 + self.group.size)
            buf = rt.open_or_create(name, size, stripe_unit=striping.stripe_unit, servers=striping.servers)
            entry = self._reductions[(dtype, nbytes)] = Reduction(buf, striping)
        if entry.expected is None:
            entry.expected = entry.buffer.version()
        return entry

    def write_part(self, data):
        """Writes `data` (flat uint8 NumPy) into this rank's part buffer for the
        coming generation; returns the part's name for the metadata."""
        parity = (self.generation + 1) % 2
        nbytes = data.nbytes  # a flat uint8 NumPy view (data.Tensor)
        current = self._parts.get(parity)
        if current is None or current[2] < nbytes:
            # Grows by doubling; an outgrown part stays until shutdown (a
            # reader of an older generation may still be on it).
            capacity = _round_up(max(nbytes, 64), 4096) if current is None else max(nbytes, 2 * current[2])
            rt = self.group.runtime
            name = f"{self.base}/part-{rt.rank}-{parity}-{capacity}"
            buf = rt.client.create(name, capacity, stripe_unit=_round_up(-(-capacity // len(rt.servers)), 64),
                                   servers=rt.servers)
            current = self._parts[parity] = (name, buf, capacity)
        if nbytes:
            current[1].write(0, data)
        return current[0]

    def peer_part(self, name):
        """Another rank's part buffer, opened once."""
        buf = self._peer_parts.get(name)
        if buf is None:
            buf = self._peer_parts[name] = self.group.runtime.client.open(name)
        return buf


def _version_within(buf, target, slice_s):
    """Whether `buf` reached version `target` within slice_s seconds."""
    if slice_s <= 0:
        return buf.version() >= target
    try:
        buf.wait_version(target, timeout=slice_s)
        return True
    except smb.Timeout:
        return False



class InlineLane:
    """Collective.allreduce_inline() for one signature (dtype, shape,
    reduction, scaling) with its arguments converted once: smb.torch's lane
    for small allreduces (torch/ops.py), where each call's conversions cost
    more than the collective itself. Each call passes the addresses of the
    payload's and the result's bytes (nbytes each, kept alive by the caller).
    The C++ lane keeps the collective's generation as _post() does, and
    scales a result it reduced by `factor` where C++ scales the dtype
    (float32, float64)."""

    def __init__(self, collective, key_of, meta, dtype, red, nbytes, factor=1.0):
        self.collective = collective
        self.key, blob = collective._keyed(key_of, meta)
        self.dtype, self.red = dtype, red
        self._lane = _core.AllreduceLane(collective.board, collective, self.key, blob, dtype, red, nbytes,
                                         _FIRST_SLICE_S, factor)
        self._call = self._lane.call
        self.factor = factor
        self.factor_left = 1.0 if self._lane.factor == factor else factor  # what a reduced result still needs

    def __call__(self, in_addr, out_addr, out):
        """As allreduce_inline(), then the factor the result at out_addr
        still needs (factor_left, or all of `factor` where a rank was late,
        which the joined ranks' zeros come before), or None when some rank's
        metadata differs. `out`: returns the result's bytes as a uint8 array
        (called only where a rank was late)."""
        try:
            outcome = self._call(in_addr, out_addr)
        except smb.InvalidArgument as e:
            raise CollectiveError(f"collective '{self.collective.name}': {e}") from e
        if outcome == _REDUCED:
            return self.factor_left
        c = self.collective
        return self.factor if c._inline_outcome(outcome, c.generation, self.key, self.dtype, self.red, out) else None


_REDUCED = _core.ArrivalBoard.REDUCED


class Reduction:
    """A reduction buffer and what this rank knows of its version: every
    server-side op over a region advances it by one on every server, and
    each use adds one op per participating rank."""

    def __init__(self, buffer, striping):
        self.buffer = buffer
        self.striping = striping
        self.expected = None   # the version before the current use (None: read it)
        self.participants = []
        self.mapped = None     # whether this rank maps all of it (data._maps_whole; None: not yet known)

    def begin(self, participants):
        """A use that the metadata check let through."""
        self.participants = participants

    def finish(self):
        self.expected += len(self.participants)
