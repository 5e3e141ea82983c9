"""smbrun's elastic mode: horovodrun's --min-np/--max-np/--host-discovery-script
on the fabric.

smbrun is the job's driver. It starts workers on free slots of this host
(each with a worker id, SMB_WORKER_ID), and publishes every change of the
job's workers as a new round in the fabric (smb.collective.membership):
the workers read it there, so a death reaches the survivors as soon as
smbrun reaps the process, not when a collective times out. A worker that
exits abnormally is replaced where a slot is free; a slot that the
discovery script adds gets a new worker; below --min-np the job waits
--elastic-timeout for slots, then fails naming the dead workers and why.

The job's state lives in the servers (hvd.elastic's commits), so a
relaunch with the same --job-id (or --resume) continues from the last
commit when the servers outlived the workers (--servers).
"""

import random
import signal
import subprocess
import time

from . import run as launcher_module
from .run import SetupError, describe_status, is_local_host, log

DISCOVERY_INTERVAL = 1.0


class Slot:
    def __init__(self, host, index):
        self.host, self.index = host, index

    def __repr__(self):
        return f"{self.host}:{self.index}"


class ElasticDriver:
    def __init__(self, launcher, job_id, master_port):
        self.launcher = launcher
        self.args = launcher.args
        self.job_id = job_id
        self.master_port = master_port
        self.live = {}          # worker id -> Proc (with .slot)
        self.order = []         # worker ids of the current round, rank order
        self.joining = []       # started, not yet in a round: they join once up (ready())
        self.gone = {}          # worker id -> why it left
        self.died = []          # worker ids that failed (for the failure message)
        self.finished = set()   # worker ids that exited 0
        self.serial = 0
        self.round = 0
        self.last_reform = 0
        self.resets = 0
        self.blacklist = {}     # host -> (until, failures)
        self.hosts = []         # (host, slots) from discovery
        self.next_discovery = 0.0
        self.waiting_since = None
        self.warned_remote = set()

    # ------------------------------------------------------------- fabric

    def connect(self):
        import smb
        from smb.collective import basics, commits, membership
        try:
            self.client = smb.Client(self.launcher.server_addrs)
        except smb.Error as e:
            raise SetupError(f"elastic: cannot reach the servers {','.join(self.launcher.server_addrs)}: {e}")
        self.job = "smb-" + self.job_id  # the workers' name for it (smb.collective.basics._job_id)
        self.fabric = basics.fabric
        self.members = membership.open_members(self.client, self.job, create=True)
        self.signals = membership.open_signals(self.client, self.job, create=True)
        store = commits.CommitStore(self.client, self.job)  # its head, made while every server is there
        self.membership = membership
        previous = membership.read(self.members)
        if previous is not None:
            self.round = previous.number
            self.last_reform = previous.last_reform
            self.serial = 1 + max([int(w[1:]) for w in list(previous.workers) + list(previous.gone)
                                   if w[1:].isdigit()] + [-1])
            seq, fields = store.summary()
            where = ", ".join(f"{k} {v}" for k, v in fields.items())
            log(f"elastic: resuming job {self.job_id} (round {previous.number}, was {previous.state}) from "
                f"commit {seq} in the fabric" + (f" ({where})" if where else "") if seq else
                f"elastic: job {self.job_id} is in the fabric (round {previous.number}) but has no commit: "
                "starting from the beginning")
        elif self.args.resume:
            raise SetupError(f"--resume {self.job_id}: the fabric has no elastic job '{self.job_id}' (its servers "
                             "must be the ones that held it: give them with --servers; servers smbrun starts "
                             "itself are new and empty)")

    def publish(self, state="running", message="", reform=True):
        """A new round of the current workers; `reform`: its members form
        it at once (someone or something was lost), else at their next
        commit (workers were only added)."""
        self.round += 1
        if reform:
            self.last_reform = self.round
        servers = self.live_servers()
        rnd = self.membership.Round(self.round, self.order, self.gone, state, message, servers, self.last_reform)
        self.membership.publish(self.members, rnd)
        self.launcher.verbose(f"elastic: round {self.round} ({state}): {', '.join(self.order) or 'no workers'} "
                              f"on {','.join(servers)}")

    def live_servers(self):
        """The servers a new round's buffers go on: those that answer now."""
        import smb
        live = []
        for i, addr in enumerate(self.launcher.server_addrs):
            if i < len(self.launcher.servers) and not self.launcher.servers[i].alive:
                continue
            try:
                smb.Client([addr], timeout=2.0)
                live.append(addr)
            except smb.Error as e:
                self.launcher.verbose(f"elastic: server {addr} does not answer ({e}): the round leaves it out")
        return live or list(self.launcher.server_addrs)

    def reform_requested(self):
        """Whether a member of the newest round that must be formed asked to
        leave it (it lost a server): a newer such round answers it."""
        import smb
        try:
            left = self.membership.reform_requested_since(self.signals)
        except smb.Error:
            return False
        if self.round and left >= self.last_reform:
            log(f"elastic: a worker of round {left} lost a server: forming the job again on the servers "
                "that answer")
            return True
        return False

    # ------------------------------------------------------------- slots

    def discover(self):
        """The (host, slots) this host may use now."""
        script = self.args.host_discovery_script
        if not script:
            return [("localhost", self.args.max_np or self.args.np)]
        try:
            done = subprocess.run([script], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            log(f"elastic: --host-discovery-script {script}: {e}; keeping the hosts it printed before")
            return self.hosts
        if done.returncode != 0:
            log(f"elastic: --host-discovery-script {script} exited with {done.returncode}: {done.stderr.strip()}; "
                "keeping the hosts it printed before")
            return self.hosts
        hosts = []
        for line in done.stdout.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            host, sep, slots = line.rpartition(":")
            if not sep or not slots.isdigit():
                host, slots = line, str(self.args.slots_per_host or 1)
            if not is_local_host(host):
                if host not in self.warned_remote:
                    self.warned_remote.add(host)
                    log(f"elastic: discovered host {host} is not this host: elastic workers start on this host "
                        "only (its slots are not used)")
                continue
            hosts.append((host, int(slots)))
        return hosts

    def free_slots(self):
        now = time.monotonic()
        used = {(p.slot.host, p.slot.index) for p in self.live.values()}
        free = []
        for host, slots in self.hosts:
            until = self.blacklist.get(host, (0, 0))[0]
            if until > now:
                continue
            free += [Slot(host, i) for i in range(slots) if (host, i) not in used]
        return free

    # ------------------------------------------------------------- workers

    def start_worker(self, slot, join_later=False):
        worker = f"w{self.serial}"
        self.serial += 1
        env = self.launcher.base_env(self.job_id, "127.0.0.1", self.master_port)
        for name in launcher_module.RANK_VARS:
            env.pop(name, None)
        env.update({"SMB_ELASTIC": "1", "SMB_WORKER_ID": worker, "HOROVOD_ELASTIC": "1",
                    "SMB_ELASTIC_TIMEOUT": f"{self.args.elastic_timeout:g}",
                    "SMB_ELASTIC_RESET_LIMIT": str(self.args.reset_limit or 0),
                    "HOROVOD_HOSTNAME": slot.host, "SMB_ELASTIC_SLOT": str(slot)})
        env.pop("WORLD_SIZE", None)
        env.pop("SMB_SIZE", None)
        proc = self.launcher.spawn_worker(f"worker {worker}", worker, env, keep_stdin=False)
        proc.slot = slot
        proc.worker = worker
        self.live[worker] = proc
        (self.joining if join_later else self.order).append(worker)
        log(f"elastic: started worker {worker} on {slot} (pid {proc.pid})")
        return worker

    def ready(self, worker):
        """Whether `worker` is up (it marked itself so in the signals buffer)."""
        import smb
        try:
            return self.membership.is_ready(self.signals, worker)
        except smb.Error:
            return False

    def admit(self):
        """Workers that came up join the job (a new round): True if any did.
        A running job meets them at its next commit; the others go on
        meanwhile, so a replacement's start costs the survivors nothing."""
        up = [w for w in self.joining if self.ready(w)]
        for w in up:
            self.joining.remove(w)
            self.order.append(w)
        return bool(up)

    def fill(self):
        """Starts workers on free slots up to --max-np; True if any started."""
        started = False
        while len(self.live) < (self.args.max_np or 1 << 30) and not self.finished:
            free = self.free_slots()
            if not free:
                break
            self.start_worker(free[0], join_later=True)
            started = True
        return started

    def reap(self):
        """Handles workers that exited; True if the membership changed."""
        changed = False
        for worker, proc in list(self.live.items()):
            if proc.poll() is None:
                continue
            del self.live[worker]
            if proc.code == 0:
                self.finished.add(worker)
                self.launcher.verbose(f"elastic: worker {worker} finished")
                continue
            why = describe_status(proc.code)
            rank = self.order.index(worker) if worker in self.order else None
            log(f"elastic: worker {worker} ({f'rank {rank}' if rank is not None else 'joining'}, pid {proc.pid}) "
                f"{why}")
            self.gone[worker] = why
            self.died.append(worker)
            self.cool_down(proc.slot.host)
            if worker in self.joining:
                self.joining.remove(worker)
            else:
                self.order.remove(worker)
                changed = True
        return changed

    def cool_down(self, host):
        span = self.args.blacklist_cooldown_range
        if not span:
            return
        failures = self.blacklist.get(host, (0, 0))[1] + 1
        low, high = span
        seconds = min(high, random.uniform(low, high) * (2 ** (failures - 1)))
        self.blacklist[host] = (time.monotonic() + seconds, failures)
        log(f"elastic: host {host} gets no new worker for {seconds:.1f} s (--blacklist-cooldown-range)")

    # ------------------------------------------------------------- the loop

    def failure_message(self):
        dead = "; ".join(f"worker {w} {self.gone[w]}" for w in self.died) or "none died"
        return (f"the job has {len(self.live)} worker(s), fewer than --min-np {self.args.min_np}, and no slot "
                f"came within --elastic-timeout {self.args.elastic_timeout:g} s; workers that died: {dead}")

    def run(self):
        self.connect()
        self.hosts = self.discover()
        self.next_discovery = time.monotonic() + DISCOVERY_INTERVAL
        for slot in self.free_slots()[:self.args.np]:
            self.start_worker(slot)
        self.publish_current()
        launcher = self.launcher
        while True:
            status = launcher.stopped_by_signal_or_timeout()
            if status is not None:
                return status
            changed = self.reap()
            if self.finished and not self.order_has_live():
                self.stop_joining()
                return self.done()
            now = time.monotonic()
            if now >= self.next_discovery:
                self.hosts = self.discover()
                self.next_discovery = now + DISCOVERY_INTERVAL
            if not self.finished:
                self.fill()
                changed = self.report_servers() or changed
                changed = self.reform_requested() or changed
                admitted = self.admit()
                if changed or admitted:
                    self.publish_current(reform=changed)
            if self.waiting_since is not None and now - self.waiting_since >= self.args.elastic_timeout:
                message = self.failure_message()
                log(f"elastic: {message}")
                self.publish("failed", message)
                launcher.stop_workers()
                return launcher_module.EXIT_SETUP
            if self.args.reset_limit is not None and self.args.reset_limit and self.resets > self.args.reset_limit:
                message = f"the job re-formed {self.resets} times, more than --reset-limit {self.args.reset_limit}"
                log(f"elastic: {message}")
                self.publish("failed", message)
                launcher.stop_workers()
                return launcher_module.EXIT_SETUP
            launcher.pump(0.05)

    def report_servers(self):
        """A server smbrun started that died is reported, not fatal: the
        job's state has a copy on another server (hvd.elastic's commits)."""
        lost = False
        for i, srv in enumerate(self.launcher.servers):
            if srv.code is None and srv.poll() is not None:
                log(f"elastic: {srv.label} (smbd pid {srv.pid} on {self.launcher.server_addrs[i]}) "
                    f"{describe_status(srv.code)}; the job goes on from the copies on the other servers")
                lost = True
        return lost

    def stop_joining(self):
        """The job is over: workers still waiting to join it are stopped."""
        joining = [self.live.pop(w) for w in list(self.joining) if w in self.live]
        self.joining.clear()
        for proc in joining:
            log(f"elastic: the job finished before {proc.label} joined it: stopping it")
            proc.signal_group(signal.SIGTERM)
        self.launcher.wait_for(joining, self.args.grace)
        for proc in joining:
            proc.signal_group(signal.SIGKILL)

    def order_has_live(self):
        return any(w in self.live for w in self.order)

    def publish_current(self, reform=True):
        if len(self.order) >= self.args.min_np:
            if self.round:
                self.resets += 1
            self.waiting_since = None
            self.publish("running", reform=reform)
        else:
            if self.waiting_since is None:
                self.waiting_since = time.monotonic()
                log(f"elastic: {len(self.order)} worker(s), fewer than --min-np {self.args.min_np}: waiting up to "
                    f"{self.args.elastic_timeout:g} s for slots")
            self.publish("waiting", f"{len(self.order)} worker(s), fewer than --min-np {self.args.min_np}")

    def done(self):
        """Every worker finished: the job's buffers go (its state included)."""
        self.publish("done", "every worker finished")
        prefix = self.fabric.buffer_name("hvd", self.job) + "/"
        try:
            for layout in self.client.list():
                if layout.name.startswith(prefix):
                    try:
                        self.client.destroy(layout.name)
                    except Exception:  # noqa: BLE001 - cleanup only
                        pass
        except Exception as e:  # noqa: BLE001
            log(f"elastic: could not remove the job's buffers: {e}")
        self.launcher.verbose(f"elastic: job {self.job_id} done after {self.resets} re-form(s)")
        return 0

