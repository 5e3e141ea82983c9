"""Process sets, as Horovod has them: a subset of ranks running collectives
of its own. In the fabric a set is a namespace of buffers (its id is part
of every buffer name), so sets never collide and two disjoint sets may use
the same collective names at once.

Sets are registered collectively: every rank calls add_process_set (or
init(process_sets=...)) with the same sets in the same order, so every
rank assigns the same ids. Ids freed by remove_process_set are reused
first, in the order they were freed.
"""

import os

from . import basics, fabric


class ProcessSet:
    """A set of global ranks. Registered sets have a process_set_id."""

    def __init__(self, ranks_or_comm):
        self.process_set_id = None
        self.mpi_comm = None
        try:
            ranks = sorted(ranks_or_comm)
        except TypeError:
            ranks = None
        if ranks is None or not all(isinstance(r, int) for r in ranks):
            raise ValueError("ProcessSet should be initialized with a list of process ranks or an mpi4py Comm object")
        self.ranks = ranks

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """The number of ranks in the set; None if it is not registered."""
        if self.process_set_id is None:
            return None
        return len(self.ranks)

    def rank(self):
        """This process's rank within the set; None if it is not registered."""
        if self.process_set_id is None:
            return None
        me = basics.rank()
        if me not in self.ranks:
            raise ValueError("Process is not part of provided process set.")
        return self.ranks.index(me)

    def included(self):
        """Whether this process belongs to the set."""
        if self.ranks is None:
            return None
        return basics.rank() in self.ranks

    def __str__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, mpi_comm={self.mpi_comm})"

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0

_free_ids = []


def register_global(state):
    global_process_set.ranks = list(range(state.size))
    global_process_set.process_set_id = 0
    state.set_ranks = {0: list(global_process_set.ranks)}
    state.process_sets = {0: fabric.ProcessGroupState(state, 0, global_process_set.ranks)}
    state.next_set_id = 1
    _free_ids.clear()


def reset():
    _free_ids.clear()


def _check_dynamic(action):
    if os.environ.get("HOROVOD_DYNAMIC_PROCESS_SETS", "0") in ("0", ""):
        raise ValueError(f"Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to allow {action} process sets after Horovod "
                         "initialization.")


def _register(state, ps):
    for existing in state.set_ranks.values():
        if existing == ps.ranks:
            raise ValueError(f"Attempted to add a duplicate process set: {ps}")
    if any(r < 0 or r >= state.size for r in ps.ranks) or len(set(ps.ranks)) != len(ps.ranks) or not ps.ranks:
        raise ValueError(f"Process set ranks must be distinct ranks of the job (0-{state.size - 1}): {ps.ranks}")
    set_id = _free_ids.pop(0) if _free_ids else state.next_set_id
    if set_id == state.next_set_id:
        state.next_set_id += 1
    ps.process_set_id = set_id
    state.set_ranks[set_id] = list(ps.ranks)
    if state.rank in ps.ranks:
        state.process_sets[set_id] = fabric.ProcessGroupState(state, set_id, ps.ranks)
    # Everyone registers before anyone uses the set (the set's buffers are
    # created on first use, by members only).
    state.barrier(f"process-set-add-{set_id}-{len(state.set_ranks)}")
    return ps


def add_process_set(process_set):
    """Registers a set (collective: every rank calls it, in the same order)."""
    state = basics.state()
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.mpi_comm is not None:
        raise NotImplementedError("Dynamically adding process sets defined by an MPI communicator is not "
                                  "implemented. Please build the process set via a list of ranks.")
    if not getattr(state, "registering_initial_sets", False):
        _check_dynamic("adding")
    return _register(state, process_set)


def register_initial(state, sets):
    """init(process_sets=[...]): all of them, or (a duplicate among them or
    of a registered set) none, with a ValueError naming the entry."""
    # Sets this init() registered before (init called again) are kept as they are.
    sets = [p for p in sets if not (p.process_set_id is not None and state.set_ranks.get(p.process_set_id) == p.ranks)]
    seen = [list(r) for r in state.set_ranks.values()]
    for i, p in enumerate(sets):
        if p.ranks in seen:
            for q in sets:
                q._invalidate()
            raise ValueError(f"Horovod could not be initialized because process_sets entry number {i} is a "
                             f"duplicate: {p}")
        seen.append(p.ranks)
    for p in sets:
        _register(state, p)


def remove_process_set(process_set):
    """Unregisters a set (collective); False for the global or an unregistered set."""
    state = basics.state()
    set_id = process_set.process_set_id
    if set_id is None or set_id == 0:
        return False
    _check_dynamic("removing")
    state.set_ranks.pop(set_id, None)
    state.process_sets.pop(set_id, None)
    state.barrier(f"process-set-remove-{set_id}-{len(state.set_ranks)}")
    _free_ids.append(set_id)
    process_set._invalidate()
    return True


def group_of(process_set, op_name):
    """The fabric state of `process_set` for a collective `op_name` run on
    this rank: ValueError for an unregistered set or a non-member."""
    state = basics.state()
    set_id = process_set.process_set_id
    if set_id is None or set_id not in state.set_ranks:
        raise ValueError(f"{op_name}: Process set provided does not exist, or has not been registered.")
    group = state.process_sets.get(set_id)
    if group is None:
        raise ValueError(f"{op_name}: Rank {state.rank} is not a member of the provided process set.")
    return group
