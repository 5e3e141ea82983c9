"""init(), shutdown() and the job's topology, as horovod.torch has them.

Where the rank comes from, in order: init()'s arguments; Open MPI's
variables under mpirun (OMPI_COMM_WORLD_*), so that rank() matches
OMPI_COMM_WORLD_RANK; smbrun's SMB_*; horovodrun's HOROVOD_RANK, ...
(so a script started by `horovodrun --gloo` runs too); torchrun's RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE; Slurm's SLURM_PROCID, SLURM_NTASKS,
SLURM_LOCALID. Without any, a single process (rank 0 of 1). The workers of
one node form a group (local_rank, local_size); SMB_TORCH_GROUP_SIZE=N
makes groups of N consecutive ranks instead.

The fabric: smb.Client() over $SMB_SERVERS; the hybrid modes' groups use
$SMB_GROUP_SERVERS for their own buffers and barriers where it is set (an
smbd on each node, so that a node averages over shared memory: see
group_servers()). Every buffer of the job lives
under a namespace made of the job id ($SMB_JOB_ID from smbrun, else the
launcher's: Open MPI's job id, torchrun's run id, Slurm's job and step),
so concurrent jobs on one fabric never collide; rank 0 destroys the job's
buffers at shutdown().
"""

import atexit
import logging
import os
import socket
import threading
import time

import smb

from . import elastic, fabric

log = logging.getLogger("smb.torch")

_state = None
_state_lock = threading.RLock()


class NotInitializedError(ValueError, fabric.HorovodInternalError):
    """A call that needs init() came before it. Horovod raises ValueError
    from rank(), size() and the like, but HorovodInternalError from a
    collective (its enqueue fails): this is both, so that either `except`
    of a Horovod script catches it."""


def _env_int(*names):
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            return int(value)
    return None


def _topology(rank, size, local_rank, local_size):
    env_rank = _env_int("OMPI_COMM_WORLD_RANK", "SMB_RANK", "HOROVOD_RANK", "RANK", "PMI_RANK", "SLURM_PROCID")
    env_size = _env_int("OMPI_COMM_WORLD_SIZE", "SMB_SIZE", "HOROVOD_SIZE", "WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
    env_local_rank = _env_int("OMPI_COMM_WORLD_LOCAL_RANK", "SMB_LOCAL_RANK", "HOROVOD_LOCAL_RANK", "LOCAL_RANK",
                              "MPI_LOCALRANKID", "SLURM_LOCALID")
    env_local_size = _env_int("OMPI_COMM_WORLD_LOCAL_SIZE", "SMB_LOCAL_SIZE", "HOROVOD_LOCAL_SIZE",
                              "LOCAL_WORLD_SIZE", "MPI_LOCALNRANKS")
    rank = env_rank if rank is None else rank
    size = env_size if size is None else size
    if rank is None or size is None:
        rank, size = 0, 1
    local_rank = env_local_rank if local_rank is None else local_rank
    local_size = env_local_size if local_size is None else local_size
    if local_size is None and os.environ.get("SLURM_NTASKS_PER_NODE", "").isdigit():
        local_size = int(os.environ["SLURM_NTASKS_PER_NODE"])
    if local_rank is None or local_size is None:
        local_rank, local_size = rank, size  # one node
    cross_rank = _env_int("GROUP_RANK", "SMB_NODE_RANK", "HOROVOD_CROSS_RANK")
    group = os.environ.get("SMB_TORCH_GROUP_SIZE", "")
    if group.isdigit() and int(group) > 0 and size % int(group) == 0:
        # Groups other than the nodes (e.g. 2 groups of 2 on one machine).
        local_size = int(group)
        local_rank = rank % local_size
        cross_rank = None
    if cross_rank is None:
        cross_rank = rank // local_size
    if not (0 <= rank < size and 0 <= local_rank < local_size <= size):
        raise ValueError(f"inconsistent topology: rank {rank} of {size}, local rank {local_rank} of {local_size}")
    return rank, size, local_rank, local_size, cross_rank


def _job_id(size):
    env = os.environ
    for name in ("SMB_JOB_ID", "OMPI_MCA_ess_base_jobid", "TORCHELASTIC_RUN_ID"):
        if env.get(name):
            return name.split("_")[0].lower() + "-" + env[name]
    if env.get("HOROVOD_GLOO_RENDEZVOUS_PORT"):
        return f"horovodrun-{env.get('HOROVOD_GLOO_RENDEZVOUS_ADDR', '')}-{env['HOROVOD_GLOO_RENDEZVOUS_PORT']}"
    if env.get("SLURM_JOB_ID"):
        return f"slurm-{env['SLURM_JOB_ID']}.{env.get('SLURM_STEP_ID', '0')}"
    if size == 1:
        return f"local-{socket.gethostname()}-{os.getpid()}"
    log.warning("smb.torch: no job id from the launcher (SMB_JOB_ID, mpirun, torchrun or Slurm); using a shared "
                "default: two such jobs on one fabric at once would collide")
    return "default"


class State:
    """Everything init() sets up; shutdown() takes it down."""

    def __init__(self, rank, size, local_rank, local_size, cross_rank, cross_size, client, job, elastic=None):
        self.rank, self.size = rank, size
        self.local_rank, self.local_size = local_rank, local_size
        self.cross_rank, self.cross_size = cross_rank, cross_size
        self.client = client
        # An elastic job's rounds each have a namespace of their own: a
        # re-formed job starts its collectives afresh.
        self.elastic = elastic
        self.job = fabric.buffer_name("hvd", job, f"r{elastic.round.number}") if elastic else \
            fabric.buffer_name("hvd", job)
        # Where the job's collectives put their buffers: an elastic round
        # names the servers smbrun reached when it made the round.
        self.servers = elastic.servers() if elastic else list(client.servers)
        self.stalls = fabric.Stalls()
        self.process_sets = {}   # id -> fabric.ProcessGroupState (where this rank is a member)
        self.set_ranks = {}      # id -> ranks, every registered set
        self.next_set_id = 1
        self.join_epoch = 0      # join() epochs completed
        self.dead = set()        # ranks found dead (their liveness lock came free)
        self._join_buffers = {}
        # The longest a collective's data phase waits once every rank arrived.
        self.op_timeout = float(os.environ.get("SMB_TORCH_OP_TIMEOUT", "600"))
        # Held for this rank's lifetime: the servers release it when this
        # process dies, which is how waiting ranks learn that it did. In an
        # elastic job smbrun reports deaths instead (watch()).
        if elastic:
            self.stalls.liveness = min(self.stalls.liveness, 0.5)
            self._alive = None
        else:
            self._alive = client.lock(self.alive_name(rank), lease=86400.0, timeout=60.0)

    def alive_name(self, rank):
        return fabric.buffer_name(self.job, "alive", rank)

    def wait_version(self, buf, target, what, between=None):
        """Waits for `buf`'s version to reach `target` (wait_until())."""
        self.wait_until(lambda s: fabric._version_within(buf, target, s), what, between)

    def wait_until(self, done_within, what, between=None):
        """Waits until done_within(slice_s) says done (it waits up to slice_s
        seconds itself), in slices that grow to the liveness interval;
        between slices it watches the elastic membership (a wait that is
        done when a member left still completes), calls `between()` (the
        caller's own checks), and gives up after SMB_TORCH_OP_TIMEOUT."""
        deadline = time.monotonic() + self.op_timeout
        slice_s = 0.005
        while not done_within(slice_s):
            slice_s = min(2 * slice_s, 1.0, self.stalls.liveness)
            try:
                self.watch(what)
            except elastic.WorkerLeft:
                if done_within(0.0):
                    return
                raise
            if between is not None:
                between()
            if time.monotonic() >= deadline:
                raise fabric.HorovodInternalError(f"{what}: no progress in {self.op_timeout:.0f} s "
                                                  "(SMB_TORCH_OP_TIMEOUT)")

    def watch(self, what):
        """Called while a wait of collective `what` goes on: in an elastic
        job, fails it at once when smbrun says a member left."""
        if self.elastic:
            self.elastic.check(what)

    def alive(self, rank):
        """False once `rank` has died (its liveness lock came free). In an
        elastic job smbrun reports deaths (watch()): no locks, no probes."""
        if rank in self.dead:
            return False
        if self.elastic:
            return True
        try:
            probe = self.client.lock(self.alive_name(rank), lease=1.0, timeout=0.01)
        except smb.Timeout:
            return True
        probe.unlock()
        self.dead.add(rank)  # a rank does not come back within a job
        return False

    def raise_if_dead(self, what, ranks, probe=False):
        """Raises RankGone for collective `what` if one of `ranks` died: at
        once for a rank known dead, and after probing its lock with probe=True."""
        dead = [r for r in ranks if r in self.dead or (probe and r != self.rank and not self.alive(r))]
        if dead:
            raise fabric.RankGone(f"collective '{what}': rank(s) {dead} died")

    def join_buffer(self, group):
        buf = self._join_buffers.get(group.set_id)
        if buf is None:
            from . import joining
            buf = self._join_buffers[group.set_id] = joining._buffer(self, group)
        return buf

    def joined_indices(self, group):
        from . import joining
        return joining.joined_indices(self, group)

    def report_stall(self, name, missing, waited):
        """Horovod's stall warning, on every waiting rank, naming the
        collective and the ranks it waits for."""
        log.warning("One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks "
                    "and are waiting for remainder of ranks for more than %d seconds. This may indicate that "
                    "different ranks are trying to submit different tensors or that only subset of ranks is "
                    "submitting tensors, which will cause deadlock. \nMissing ranks:\n%s", int(waited),
                    "\n".join(f"{r}: [{name}]" for r in missing))

    def open_or_create(self, name, size, stripe_unit, servers=None):
        return self.client.open_or_create(name, size, stripe_unit=stripe_unit, servers=servers or self.servers)

    def barrier(self, what, timeout=300.0):
        self.client.barrier(fabric.buffer_name(self.job, "barrier", what), self.size, timeout)


def init(comm=None, process_sets=None, rank=None, size=None, local_rank=None, local_size=None, servers=None):
    """Starts smb.torch: connects to the fabric and meets every other rank.

    comm: accepted for Horovod compatibility (a list of ranks is not supported;
    use process sets). process_sets: ProcessSet objects to register now, or
    "dynamic". The keyword arguments override what the launcher says."""
    global _state
    from . import process_sets as ps
    with _state_lock:
        if _state is None:
            if comm is not None and not isinstance(comm, (list, tuple)):
                log.info("smb.torch: init(comm=...) ignored; ranks come from the launcher")
            if elastic.enabled():
                _state = _form_elastic(smb.Client(servers), None)
            else:
                rank, size, local_rank, local_size, cross_rank = _topology(rank, size, local_rank, local_size)
                cross_size = max(1, size // local_size)
                client = smb.Client(servers)
                state = State(rank, size, local_rank, local_size, cross_rank, cross_size, client, _job_id(size))
                state.barrier("init")
                _state = state
            ps.register_global(_state)
            from . import timeline
            timeline.start_from_environment()
            atexit.register(shutdown)
        # Sets given to init() register collectively, all or none; init()
        # again with a valid list proceeds (Horovod's behaviour).
        if process_sets == "dynamic":
            os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
        elif process_sets:
            ps.register_initial(_state, process_sets)


def _form_elastic(client, job):
    """An elastic worker's state at the round that takes it in (one host:
    every worker is local; rank = place in the round)."""
    if job is None:
        worker = os.environ.get("SMB_WORKER_ID")
        if not worker:
            raise fabric.HorovodInternalError("SMB_ELASTIC=1 without SMB_WORKER_ID: elastic workers are started by "
                                              "smbrun --min-np/--max-np/--host-discovery-script")
        job = elastic.ElasticJob(client, _job_id(2), worker)
    rnd = job.form()
    rank, size = rnd.rank_of(job.worker), len(rnd.workers)
    state = State(rank, size, rank, size, 0, 1, job.round_client(), job.job, elastic=job)
    job.commits.enter_round(rnd.number, size, rank, state.open_or_create(
        fabric.buffer_name(state.job, "commit"), 64, stripe_unit=64), state.servers)
    if rank == 0:
        job.cleanup_rounds(rnd.number)
    log.info("smb.torch elastic: worker %s is rank %d of %d (round %d)", job.worker, rank, size, rnd.number)
    return state


def reform():
    """Elastic jobs: leaves the current round and forms the job again at
    the newest round (new rank(), size() and global process set; other
    process sets are dropped, as in Horovod's elastic mode)."""
    global _state
    from . import handles
    from . import process_sets as ps
    with _state_lock:
        old = state()
        if not old.elastic:
            raise ValueError("reform() is for elastic jobs (smbrun --min-np/--max-np)")
        handles.reset()
        ps.reset()
        _state = _form_elastic(old.client, old.elastic)
        ps.register_global(_state)
        return _state


def shutdown():
    """Meets every other rank, destroys the job's buffers (rank 0) and
    disconnects. init() may be called again afterwards."""
    global _state
    from . import handles, timeline
    with _state_lock:
        state = _state
        if state is None:
            return
        handles.wait_all_pending()
        timeline.stop_timeline()
        try:
            if state.dead:  # nobody to meet: leave the job's buffers to the servers' operator
                raise smb.ServerGone(f"rank(s) {sorted(state.dead)} died", "server_gone")
            state.barrier("shutdown", timeout=60.0)
            if state.rank == 0:
                prefix = state.job + "/"
                for layout in state.client.list():
                    if layout.name.startswith(prefix):
                        try:
                            state.client.destroy(layout.name)
                        except smb.Error:
                            pass
        except smb.Error as e:
            log.warning("smb.torch: shutdown could not meet every rank (%s); leaving the job's buffers", e)
        # Release this rank's liveness lock: the connection stays open, so the
        # servers would keep it, and init() again (same job, same rank) would
        # wait for it in vain.
        try:
            if state._alive is not None:
                state._alive.unlock()
        except smb.Error:
            pass
        _state = None
        from . import process_sets as ps
        ps.reset()
        handles.reset()


def group_servers():
    """Memory servers for a hybrid group's own buffers and barriers: the
    list in $SMB_GROUP_SERVERS ("host:port,..."; every node names its own,
    e.g. 127.0.0.1:7100 for an smbd on each node), or None for the job's."""
    servers = [s.strip() for s in os.environ.get("SMB_GROUP_SERVERS", "").split(",") if s.strip()]
    return servers or None


def is_initialized():
    return _state is not None


def state():
    if _state is None:
        raise NotInitializedError("Horovod has not been initialized; use hvd.init().")
    return _state


def rank():
    return state().rank


def size():
    return state().size


def local_rank():
    return state().local_rank


def local_size():
    return state().local_size


def cross_rank():
    return state().cross_rank


def cross_size():
    return state().cross_size


def is_homogeneous():
    return True


# What this build has (Horovod's capability queries, answered truthfully:
# collectives go through the smb fabric, not MPI, gloo or NCCL).
def mpi_threads_supported():
    return False


def mpi_built():
    return False


def mpi_enabled():
    return False


def gloo_built():
    return False


def gloo_enabled():
    return False


def nccl_built():
    return 0


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    """Whether the framework here can use CUDA (torch's view, where it is there)."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and torch.version.cuda is not None


def rocm_built():
    return False
