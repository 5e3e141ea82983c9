"""This worker's place in an elastic job (smbrun --min-np/--max-np/
--host-discovery-script): forming the job at a round, noticing a newer one.

A round (membership.py) lists the workers in rank order. Forming the job
at round r is a rendezvous in the fabric: each listed worker arrives with
one server-side op on the round's rendezvous buffer, and all wait for r's
count (a notified wait_version). A round that smbrun replaces while its
rendezvous is under way (a listed worker died, another came) is left for
the new one: no worker trains in a round that not every member reached.

While training, a worker looks at the round word whenever a wait of a
collective or a commit takes longer than its first slice: a round that
drops a member of this one fails the wait at once, naming the worker and
why it left (smbrun wrote that); a round that only adds workers is kept
for the next commit (check_host_updates), where every member agrees on it.
"""

import logging
import os
import struct
import time

import smb

from . import commits, fabric, membership

log = logging.getLogger("smb.elastic")


class WorkerLeft(fabric.RankGone):
    """A member of this round left the job (smbrun published a round without it)."""


def enabled():
    return os.environ.get("SMB_ELASTIC", "") not in ("", "0")


class ElasticJob:
    """What stays with a worker process across the rounds it takes part in."""

    def __init__(self, client, job, worker_id, timeout=None):
        self.client = client
        self.job = job
        self.worker = worker_id
        self.timeout = float(os.environ.get("SMB_ELASTIC_TIMEOUT", "600")) if timeout is None else timeout
        try:
            self.members = membership.open_members(client, job)
        except smb.NotFound:
            raise fabric.HorovodInternalError(
                f"elastic job '{job}' has no membership record in the fabric: start elastic workers with smbrun "
                "--min-np/--max-np/--host-discovery-script (SMB_ELASTIC=1 is set by it)") from None
        self.signals = membership.open_signals(client, job)
        self.commits = commits.CommitStore(client, job)
        self.round = None       # the membership.Round this worker trains in
        self.seen = 0           # the newest round number looked at
        self._clients = {}      # tuple of servers -> smb.Client (round_client)
        membership.mark_ready(self.signals, worker_id)  # smbrun takes it into the next round

    # ------------------------------------------------------------- forming

    def form(self):
        """Waits for a round that lists this worker and for all its members
        to reach it; returns that round."""
        deadline = time.monotonic() + self.timeout
        version = self.members.version()
        while True:
            rnd = membership.read(self.members)
            # A round this worker trained in is never formed again (its
            # members are not all there any more): wait for a newer one.
            if rnd is not None and (self.round is None or rnd.number > self.round.number):
                self.seen = max(self.seen, rnd.number)
                if rnd.state not in ("running", "waiting"):
                    raise fabric.HorovodInternalError(f"the elastic job ended ({rnd.state}): {rnd.message}")
                if rnd.state == "running" and self.worker in rnd.workers and self._rendezvous(rnd, deadline):
                    self.round = rnd
                    return rnd
                if self.worker in rnd.gone:
                    raise fabric.HorovodInternalError(f"worker {self.worker} was removed from the job: "
                                                      f"{rnd.gone[self.worker]}")
            if time.monotonic() >= deadline:
                raise fabric.HorovodInternalError(
                    f"worker {self.worker}: no round of the job took it in within {self.timeout:g} s "
                    "(SMB_ELASTIC_TIMEOUT)")
            version = membership.wait_change(self.members, version, 0.5)

    def _rendezvous(self, rnd, deadline):
        """True once every member of `rnd` arrived; False if a newer round replaced it."""
        n = len(rnd.workers)
        servers = rnd.servers or None
        rdv = self.client_for(servers).open_or_create(fabric.buffer_name(membership.job_namespace(self.job), f"rdv-{rnd.number}"),
                                         8 * n, stripe_unit=fabric._round_up(8 * n, 64), servers=servers,
                                         replicas=membership.copies(self.client, servers))
        try:
            rdv.apply("copy", "u8", 8 * rnd.rank_of(self.worker), x=struct.pack("<q", 1))
            while True:
                try:
                    rdv.wait_version(n, timeout=0.1)
                    return True
                except smb.Timeout:
                    pass
                if membership.current_number(self.members) > rnd.number:
                    return rdv.version() >= n   # everyone came after all: go on in this round
                if time.monotonic() >= deadline:
                    missing = [w for i, w in enumerate(rnd.workers)
                               if struct.unpack("<q", rdv.read(8 * i, size=8))[0] == 0]
                    raise fabric.HorovodInternalError(
                        f"round {rnd.number} of the elastic job: worker(s) {missing} never arrived within "
                        f"{self.timeout:g} s (SMB_ELASTIC_TIMEOUT)")
        finally:
            rdv.close()

    # ------------------------------------------------------------- watching

    def latest(self):
        """The newest round number (one small read)."""
        number = membership.current_number(self.members)
        self.seen = max(self.seen, number)
        return number

    def check(self, what):
        """Raises WorkerLeft if a newer round dropped a member of this one."""
        if self.round is None or self.latest() <= self.round.number:
            return
        rnd = membership.read(self.members)
        if rnd is None:
            return
        left = [w for w in self.round.workers if w not in rnd.workers]
        if left or rnd.state != "running" or rnd.last_reform > self.round.number:
            why = "; ".join(f"worker {w} (rank {self.round.rank_of(w)}) {rnd.gone.get(w, 'left the job')}"
                            for w in left) or rnd.message or "the job is forming again"
            raise WorkerLeft(f"{what}: {why}")

    def servers(self):
        """The servers this round's buffers go on."""
        return (self.round.servers if self.round is not None and self.round.servers else None) or \
            list(self.client.servers)

    def client_for(self, servers):
        """A client over `servers` only (the whole job's where None or all):
        a buffer's layout is kept on its name's home, chosen among the
        client's servers, so a round's buffers must not count a lost one."""
        if not servers or sorted(servers) == sorted(self.client.servers):
            return self.client
        key = tuple(sorted(servers))
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = smb.Client(list(key))
        return client

    def round_client(self):
        """The client of this round's buffers, collectives and barriers."""
        return self.client_for(self.servers())

    def request_reform(self, why):
        """A member lost a server: asks smbrun for a new round (on the
        servers it still reaches), which every member then forms."""
        log.warning("worker %s: %s; asking smbrun to form the job again", self.worker, why)
        membership.request_reform(self.signals, self.round.number if self.round is not None else 0)

    def cleanup_rounds(self, current):
        """Member 0: removes earlier rounds' buffers (best effort; some may
        have been on a server that is gone)."""
        prefixes = [fabric.buffer_name("hvd", self.job, f"r{n}") + "/" for n in range(max(1, current - 64), current)]
        rdv = [fabric.buffer_name(membership.job_namespace(self.job), f"rdv-{n}") for n in range(1, current)]
        try:
            names = [b.name for b in self.client.list()]
        except smb.Error:
            return
        for name in names:
            if any(name.startswith(p) for p in prefixes) or name in rdv:
                try:
                    self.client.destroy(name)
                except smb.Error:
                    pass
