"""An elastic job's committed state in the fabric, framework neutral.

A commit is a set of tensors (bytes, dtype, shape) and a small blob of
everything else (the framework layer pickles it). It lives in buffers of
the job's elastic namespace, with 2 copies where the fabric has two
servers, so that it outlives every worker and any one server:

  head           64 bytes: magic, the last complete commit's number (seq),
                 the slot it is in, its layout's id, the round that made
                 it, and a checksum over those.
  state-<id>     one buffer per layout (the tensors' names, types, shapes):
                 the layout's JSON, then two slots, each every tensor at
                 its offset.
  blob-0, blob-1 the blob of the commit in that slot (its length, then its
                 bytes), written by one member, grown when it outgrows it.

Commit k+1 goes into the slot that commit k does not use, so a commit
that fails half way (a worker died) leaves commit k whole; the head names
the new slot only once every member has written its part. The members
share the writing: each tensor has one writer, the members taking the
tensors in turn by size, so a commit costs each of W members about 1/W of
the bytes. A writer writes only the tensors that changed since it last
wrote that slot (the framework's change key, e.g. torch's version counter).

Every member calls commit() together (it ends with one arrival each on
the round's commit counter and a notified wait for all), and restore()
only when the job is quiet (after the round's rendezvous): the head then
does not move while it is read.
"""

import hashlib
import json
import struct

import numpy as np

from . import fabric, membership

MAGIC = 0x534D42434F4D4954  # "SMBCOMIT"
_HEAD = struct.Struct("<QQQQQQ")  # magic, seq, slot, layout id, round, checksum
_ALIGN = 64


class Head:
    def __init__(self, seq=0, slot=0, layout_id=0, round_number=0):
        self.seq, self.slot, self.layout_id, self.round = seq, slot, layout_id, round_number

    def pack(self):
        body = struct.pack("<QQQQQ", MAGIC, self.seq, self.slot, self.layout_id, self.round)
        check = int.from_bytes(hashlib.blake2b(body, digest_size=8).digest(), "little")
        return body + struct.pack("<Q", check) + bytes(64 - _HEAD.size)

    @staticmethod
    def unpack(raw):
        magic, seq, slot, layout_id, rnd, check = _HEAD.unpack_from(raw)
        if magic == 0 and seq == 0:
            return Head()
        body = bytes(raw[:40])
        if magic != MAGIC or check != int.from_bytes(hashlib.blake2b(body, digest_size=8).digest(), "little"):
            return None
        return Head(seq, slot, layout_id, rnd)


class Spec:
    """One tensor of a layout."""

    def __init__(self, name, dtype, shape, nbytes):
        self.name, self.dtype, self.shape, self.nbytes = name, dtype, list(shape), nbytes
        self.offset = 0  # within a slot's tensor area

    def as_list(self):
        return [self.name, self.dtype, self.shape, self.nbytes]


class Layout:
    """Where each tensor sits in a state buffer."""

    def __init__(self, specs):
        self.specs = specs
        at = 0
        for s in specs:
            s.offset = at
            at = fabric._round_up(at + s.nbytes, _ALIGN)
        self.tensor_bytes = at
        self.json = json.dumps({"tensors": [s.as_list() for s in specs]}, separators=(",", ":")).encode()
        self.id = int.from_bytes(hashlib.blake2b(self.json, digest_size=8).digest(), "little") >> 1
        self.header = fabric._round_up(16 + len(self.json), _ALIGN)
        self.slot_bytes = max(_ALIGN, self.tensor_bytes)
        self.size = self.header + 2 * self.slot_bytes

    @staticmethod
    def from_json(blob):
        return Layout([Spec(*t) for t in json.loads(blob)["tensors"]])

    def tensor_at(self, slot, spec):
        return self.header + slot * self.slot_bytes + spec.offset

    def writers(self, members):
        """Which member writes each tensor: largest first, each to the
        member with the fewest bytes so far (the same on every member)."""
        load = [0] * members
        owner = [0] * len(self.specs)
        for i in sorted(range(len(self.specs)), key=lambda i: (-self.specs[i].nbytes, i)):
            m = min(range(members), key=lambda k: (load[k], k))
            owner[i] = m
            load[m] += self.specs[i].nbytes
        return owner


class Snapshot:
    """What restore() read: the blob and each tensor's bytes (NumPy uint8)."""

    def __init__(self, seq, blob, specs, arrays):
        self.seq, self.blob, self.specs, self.arrays = seq, blob, specs, arrays


class CommitStore:
    """One member's handle on the job's committed state."""

    def __init__(self, client, job):
        self.client = client
        self.namespace = membership.job_namespace(job)
        self.copies = membership.copies(client)
        self.head_buffer = client.open_or_create(fabric.buffer_name(self.namespace, "head"), 64, stripe_unit=64,
                                                 replicas=self.copies)
        self.seq = None          # the commit this member's state is at (None: read the head)
        self._layout = None
        self._state = None       # the state buffer of self._layout
        self._written = [{}, {}]  # per slot: tensor index -> change key this member wrote there
        self._round = None       # [round number, members, index, commit counter, arrivals so far]
        self._blobs = [None, None]  # blob buffers this member writes (member 0)
        self._round_servers = []    # where the round's new buffers go (enter_round)

    # ------------------------------------------------------------- the round

    def enter_round(self, round_number, members, index, counter, servers):
        """A new round: `counter` is its commit counter buffer (version 0
        at the round's start), `servers` those its new buffers go on; the
        writers change, so write everything."""
        self._round = [round_number, members, index, counter, 0]
        self._round_servers = list(servers)
        self.forget_written()

    def _servers(self):
        return self._round_servers or list(self.client.servers)

    def forget_written(self):
        self._written = [{}, {}]

    # ------------------------------------------------------------- reading

    def head(self):
        for _ in range(100):
            head = Head.unpack(self.head_buffer.read(0, size=64))
            if head is not None:
                return head
        raise fabric.HorovodInternalError("the elastic state's head record is corrupt (its checksum never matched)")

    def _open_layout(self, layout_id):
        if self._layout is not None and self._layout.id == layout_id:
            return self._layout
        buf = self.client.open(fabric.buffer_name(self.namespace, f"state-{layout_id:x}"))
        (length,) = struct.unpack("<Q", buf.read(0, size=8))
        layout = Layout.from_json(bytes(buf.read(16, size=length)))
        if layout.id != layout_id:
            raise fabric.HorovodInternalError(f"elastic state buffer state-{layout_id:x} holds layout "
                                              f"{layout.id:x}")
        self._layout, self._state = layout, buf
        self.forget_written()
        return layout

    def _blob_buffer(self, slot, capacity=None):
        """Slot `slot`'s blob buffer: opened, or (capacity given) made to hold
        `capacity` bytes, created again larger where it is smaller."""
        name = fabric.buffer_name(self.namespace, f"blob-{slot}")
        if capacity is None:
            return self.client.open(name)
        current = self._blobs[slot]
        servers = self._servers()
        copies = membership.copies(self.client, servers)
        if current is None:
            current = self.client.open_or_create(name, capacity, stripe_unit=fabric._round_up(capacity, _ALIGN),
                                                 servers=servers, replicas=copies)
        if current.size < capacity:
            current.close()
            self.client.destroy(name)
            size = fabric._round_up(2 * capacity, _ALIGN)
            current = self.client.create(name, size, stripe_unit=size, servers=servers, replicas=copies)
        self._blobs[slot] = current
        return current

    def restore(self):
        """The last complete commit (None if there is none yet)."""
        head = self.head()
        if head.seq == 0:
            self.seq = 0
            return None
        layout = self._open_layout(head.layout_id)
        buf = self._state
        blobs = self._blob_buffer(head.slot)
        (length,) = struct.unpack("<Q", blobs.read(0, size=8))
        if length > blobs.size - 8:
            raise fabric.HorovodInternalError(f"elastic commit {head.seq}: a blob of {length} bytes in a buffer of "
                                              f"{blobs.size}")
        blob = bytes(blobs.read(8, size=length))
        blobs.close()
        self._blobs[head.slot] = None
        arrays = [np.empty(s.nbytes, dtype=np.uint8) for s in layout.specs]
        requests = [buf.read_async(layout.tensor_at(head.slot, s), a) for s, a in zip(layout.specs, arrays) if s.nbytes]
        for r in requests:
            r.wait()
        self.seq = head.seq
        return Snapshot(head.seq, blob, layout.specs, arrays)

    def summary(self):
        """(seq, the last commit's summary as a dict) without reading its tensors."""
        head = self.head()
        if head.seq == 0:
            return 0, {}
        blobs = self._blob_buffer(head.slot)
        try:
            (length,) = struct.unpack("<Q", blobs.read(0, size=8))
            if length + 16 > blobs.size:
                return head.seq, {}
            (extra,) = struct.unpack("<Q", blobs.read(8 + length, size=8))
            if not extra or length + 16 + extra > blobs.size:
                return head.seq, {}
            return head.seq, json.loads(bytes(blobs.read(16 + length, size=extra)))
        finally:
            blobs.close()

    # ------------------------------------------------------------- writing

    def _layout_for(self, specs):
        """The current layout if the tensors are the same, else a new one
        (a new state buffer: the same decision on every member)."""
        current = self._layout
        if current is not None and [s.as_list() for s in current.specs] == [s.as_list() for s in specs]:
            return current, False
        layout = Layout(specs)
        servers = self._servers()
        stripe = fabric._round_up(max(64 * 1024, -(-layout.size // len(servers))), _ALIGN)
        buf = self.client.open_or_create(fabric.buffer_name(self.namespace, f"state-{layout.id:x}"), layout.size,
                                         stripe_unit=stripe, servers=servers,
                                         replicas=membership.copies(self.client, servers))
        self._layout, self._state = layout, buf
        self.forget_written()
        return layout, True

    def commit(self, specs, arrays, keys, blob, wait_all, observed_round, writers=None, summary=b""):
        """Writes this member's part of commit seq+1 and, once every member
        has (wait_all(counter, target)), makes it the head. `arrays` are
        the tensors' bytes (flat uint8, NumPy, or a function that makes them),
        `keys` their change keys
        (None: always write); member 0 writes `blob`. `writers`: how many
        members share the tensors (default all; 1: member 0 writes all).
        Each member arrives with the newest membership round it saw
        (`observed_round`): the counter keeps their maximum, which every
        member reads after the wait, so all agree on it. `summary`: a few
        bytes of JSON kept beside the blob for readers without the
        framework (smbrun --resume prints it). Returns (the new commit's
        number, that round)."""
        if self._round is None:
            raise fabric.HorovodInternalError("elastic commit outside a round (the job was not formed)")
        if self.seq is None:
            self.seq = self.head().seq
        round_number, members, index, counter, arrivals = self._round
        layout, new_layout = self._layout_for(specs)
        slot = (self.seq + 1) % 2
        written = self._written[slot]
        buf = self._state
        requests = []
        sharing = members if writers is None else writers
        if sharing != members:
            self.forget_written()  # the writers change now and back after
        owners = layout.writers(sharing)
        for i, (spec, data, key) in enumerate(zip(layout.specs, arrays, keys)):
            if owners[i] != index or not spec.nbytes:
                continue
            if key is not None and written.get(i) == key:
                continue  # unchanged since this member wrote it into this slot
            if callable(data):
                data = data()  # e.g. a device tensor's host copy: made only when written
            requests.append(buf.write_async(layout.tensor_at(slot, spec), data))
            written[i] = key
        if index == 0:
            if new_layout:
                buf.write(0, struct.pack("<Q", len(layout.json)))
                buf.write(16, layout.json)
            record = struct.pack("<Q", len(blob)) + blob + struct.pack("<Q", len(summary)) + summary
            self._blob_buffer(slot, len(record)).write(0, record)
        for r in requests:
            r.wait()
        # Arrive (one server op: the counter's version counts arrivals);
        # once all have, every member writes the same head.
        # The word alternates with the slot: a fast member's next commit
        # must not move the maximum a slow one has yet to read.
        counter.apply("max", "i64", 8 * slot, x=struct.pack("<q", observed_round))
        self._round[4] = arrivals + members
        wait_all(counter, arrivals + members)
        (agreed,) = struct.unpack("<q", counter.read(8 * slot, size=8))
        self.head_buffer.write(0, Head(self.seq + 1, slot, layout.id, round_number).pack())
        self.seq += 1
        if sharing != members:
            self.forget_written()
        return self.seq, agreed

    def destroy_other_layouts(self):
        """Removes state buffers of earlier layouts (best effort; member 0)."""
        if self._layout is None:
            return
        keep = fabric.buffer_name(self.namespace, f"state-{self._layout.id:x}")
        prefix = fabric.buffer_name(self.namespace, "state-")
        for layout in self.client.list():
            if layout.name.startswith(prefix) and layout.name != keep:
                try:
                    self.client.destroy(layout.name)
                except Exception:  # noqa: BLE001 - cleanup only
                    pass
