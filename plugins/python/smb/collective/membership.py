"""Who is in an elastic job: the membership record in the fabric.

smbrun (the only writer) publishes each membership as a numbered round:
the workers in rank order, plus why the workers that left did. The
workers read it; a round is never changed once published, a new one
replaces it. Rank = place in the round's list, so every worker that reads
round r agrees on the ranks without talking to any other.

The buffer (replicated when the fabric has two servers or more):

  0   u64  the current round (written last, by a server-side op, so that
           the buffer's version moves and waiters wake: wait_version)
  8   u64  length of round r's JSON, in area r % 2
  16  ...  two areas of AREA bytes: JSON {"round", "workers", "gone",
           "state", "message"}; a round is written into the area the
           current one does not use, then the round word names it.

States: "running"; "waiting" (fewer workers than --min-np: nobody forms
it, the workers wait for the next); "failed" (smbrun gave up: the message
says why, the workers exit with it); "done".
"""

import json
import struct

import smb

from . import fabric

AREA = 64 * 1024
SIZE = 16 + 2 * AREA


def job_namespace(job):
    """The elastic part of a job's namespace (the same for every round)."""
    return fabric.buffer_name("hvd", job, "elastic")


def copies(client, servers=None):
    """Copies of the job's elastic buffers: 2 where there are two servers
    (`servers`: those usable now; default all of the client's)."""
    return 2 if len(servers or client.servers) >= 2 else 1


def open_members(client, job, create=False):
    name = fabric.buffer_name(job_namespace(job), "members")
    if create:
        return client.open_or_create(name, SIZE, stripe_unit=fabric._round_up(SIZE, 64), replicas=copies(client))
    return client.open(name)


class Round:
    """One published membership."""

    def __init__(self, number, workers, gone=None, state="running", message="", servers=None, last_reform=None):
        self.number = number
        self.workers = list(workers)     # worker ids, rank order
        self.gone = dict(gone or {})     # worker id -> why it left (cumulative)
        self.state = state
        self.message = message
        # The servers the round's own buffers go on (those smbrun reached):
        # every member stripes alike, and none uses a server that is gone.
        self.servers = list(servers or [])
        # The newest round that members of an earlier one must form at once
        # (a worker or a server was lost), rather than at their next commit
        # (a round that only adds workers): this one's number, or less.
        self.last_reform = number if last_reform is None else last_reform

    def rank_of(self, worker):
        return self.workers.index(worker) if worker in self.workers else None

    def to_json(self):
        return json.dumps({"round": self.number, "workers": self.workers, "gone": self.gone, "state": self.state,
                           "message": self.message, "servers": self.servers, "last_reform": self.last_reform},
                          separators=(",", ":")).encode()

    @staticmethod
    def from_json(blob):
        d = json.loads(blob)
        return Round(d["round"], d["workers"], d.get("gone"), d.get("state", "running"), d.get("message", ""),
                     d.get("servers"), d.get("last_reform"))


# The signals buffer: what workers tell smbrun. Word 0 is the newest round
# a member asked to leave (it lost a server: the job must form again, a
# server-side max, so that the members of one round ask once); word 1 + k
# is set when the worker with serial k is up (it joins at the next round).
SIGNAL_WORDS = 8192


def open_signals(client, job, create=False):
    name = fabric.buffer_name(job_namespace(job), "signals")
    if create:
        size = 8 * SIGNAL_WORDS
        return client.open_or_create(name, size, stripe_unit=size, replicas=copies(client))
    return client.open(name)


def serial_of(worker):
    return int(worker[1:]) if worker[1:].isdigit() else None


def mark_ready(signals, worker):
    serial = serial_of(worker)
    if serial is not None:
        signals.write(8 * (1 + serial % (SIGNAL_WORDS - 1)), struct.pack("<q", serial + 1))


def is_ready(signals, worker):
    serial = serial_of(worker)
    (mark,) = struct.unpack("<q", signals.read(8 * (1 + serial % (SIGNAL_WORDS - 1)), size=8))
    return mark == serial + 1


def request_reform(signals, round_number):
    signals.apply("max", "i64", 0, x=struct.pack("<q", round_number))


def reform_requested_since(signals):
    """The newest round a member asked to leave."""
    (number,) = struct.unpack("<q", signals.read(0, size=8))
    return number


def publish(buffer, rnd):
    """Writes round `rnd` (smbrun only). Its JSON goes into the area the
    current round does not use, then the round word moves (one server op:
    the version wakes every waiter)."""
    blob = rnd.to_json()
    if len(blob) > AREA:
        raise ValueError(f"membership round {rnd.number}: {len(blob)} bytes of JSON exceed {AREA}")
    buffer.write(16 + (rnd.number % 2) * AREA, blob)
    buffer.write(8, struct.pack("<Q", len(blob)))
    buffer.apply("copy", "u8", 0, x=struct.pack("<Q", rnd.number))


def current_number(buffer):
    (number,) = struct.unpack("<Q", buffer.read(0, size=8))
    return number


def read(buffer):
    """The current round, or None before the first. A round published
    while this reads is detected (numbers disagree) and read again."""
    while True:
        number = current_number(buffer)
        if number == 0:
            return None
        (length,) = struct.unpack("<Q", buffer.read(8, size=8))
        if 0 < length <= AREA:
            try:
                rnd = Round.from_json(bytes(buffer.read(16 + (number % 2) * AREA, size=length)))
            except ValueError:
                rnd = None
            if rnd is not None and rnd.number == number:
                return rnd
        if current_number(buffer) == number:
            raise fabric.HorovodInternalError(f"the job's membership record (round {number}) is unreadable")


def wait_change(buffer, known_version, timeout):
    """Waits up to `timeout` s for a publication after `known_version` of
    the buffer; returns the buffer's version then (the same if none came)."""
    try:
        buffer.wait_version(known_version + 1, timeout=timeout)
    except smb.Timeout:
        pass
    return buffer.version()
