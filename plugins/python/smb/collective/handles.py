"""Asynchronous collectives, framework neutral: every *_async call of a
framework layer (smb.torch, smb.tensorflow) starts its collective on a
worker thread and gets an int handle at once; poll(handle) says whether it
finished and synchronize(handle) returns its result or raises its error.

A collective's name (Horovod's "<op>.<name>", or "<op>.noname.<handle>"
without one) is what matches it across ranks; a name stays reserved on
this rank until its handle is synchronized, so submitting it again while
outstanding is a ValueError, deterministically.
"""

import itertools
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from . import basics, timeline
from .fabric import HorovodInternalError
from .process_sets import group_of

_DUPLICATE = ("Requested to allreduce, allgather, or broadcast a tensor with the same name as another tensor that is "
              "currently being processed.  If you want to request another tensor, use a different tensor name.")

# Collectives wait in threads of their own: ranks may submit in different
# orders, and each waits only for its own peers. That holds while every
# outstanding collective has a thread: with 64 threads, 65+ async ops
# submitted in different orders on two ranks deadlocked (each rank's
# threads all waiting for ops the other had queued behind them). Threads
# start only when needed, so the bound is SMB_MAX_INFLIGHT (default 4096)
# collectives in flight per rank, in any order.
_executor = ThreadPoolExecutor(max_workers=int(os.environ.get("SMB_MAX_INFLIGHT", "4096")),
                               thread_name_prefix="smb.collective")
_lock = threading.Lock()
_handles = {}
_reserved = set()
_counter = itertools.count(1)
_here = threading.local()  # .active: submit() runs the collective in the caller's thread


class _Pending:
    def __init__(self, future, key, finish):
        self.future = future
        self.key = key
        self.finish = finish  # result -> what synchronize returns


def next_handle():
    return next(_counter)


def reset():
    """shutdown(): forget handles, names and the counter (Horovod resets them)."""
    global _counter
    with _lock:
        _handles.clear()
        _reserved.clear()
        _counter = itertools.count(1)


def wait_all_pending():
    for pending in list(_handles.values()):
        try:
            pending.future.result(timeout=60)
        except Exception:  # noqa: BLE001 - shutdown waits, it does not report
            pass


def full_name(prefix, name, handle):
    return f"{prefix}.{name}" if name else f"{prefix}.noname.{handle}"


def _reserve(process_set, op_label, prefix, name, handle):
    """(group, full name, key) of a collective about to start, its name
    reserved on this rank (ValueError where it is outstanding already)."""
    basics.state()  # raises before init
    group = group_of(process_set, op_label)
    full = full_name(prefix, name, handle)
    key = (group.set_id, full)
    with _lock:
        if key in _reserved:
            raise ValueError(_DUPLICATE)
        _reserved.add(key)
    return group, full, key


def submit(handle, process_set, op_label, prefix, name, work, finish=lambda r: r):
    """Starts work(group, full_name) in the background; returns `handle`."""
    group, full, key = _reserve(process_set, op_label, prefix, name, handle)
    record = timeline.begin(full, prefix.upper())

    def run():
        with timeline.running(record):
            try:
                return work(group, full)
            finally:
                timeline.end(record)

    if getattr(_here, "active", False):
        future = Future()
        try:
            future.set_result(run())
        except Exception as e:  # noqa: BLE001 - synchronize() raises it, as from a thread
            future.set_exception(e)
    else:
        future = _executor.submit(run)
    _handles[handle] = _Pending(future, key, finish)
    return handle


def check_not_outstanding(group, full):
    """ValueError where collective `full` of `group` is outstanding on this
    rank (a synchronous call that reserves nothing checks only this)."""
    with _lock:
        if (group.set_id, full) in _reserved:
            raise ValueError(_DUPLICATE)


def run_now(process_set, op_label, prefix, name, work):
    """A synchronous collective with none of a handle's machinery (no
    Future, no registry): its name reserved while it runs, its timeline
    record, its errors as synchronize() raises them; returns work(group,
    full_name). What submit() then synchronize() in this thread amount to."""
    # A handle number all the same: unnamed collectives are named by it.
    group, full, key = _reserve(process_set, op_label, prefix, name, next_handle())
    record = timeline.begin(full, prefix.upper())
    try:
        with timeline.running(record):
            try:
                return work(group, full)
            finally:
                timeline.end(record)
    except (HorovodInternalError, ValueError, TypeError, NotImplementedError):
        raise
    except Exception as e:  # smb.Error and the like: the collective failed
        raise HorovodInternalError(str(e)) from e
    finally:
        with _lock:
            _reserved.discard(key)


def run_here(start):
    """The synchronous API: start() submits one collective, which runs in
    this thread, and its result is returned. Handing it to a worker thread
    and waiting there for it costs two thread switches, more than a small
    collective itself; the caller would block either way, and other
    outstanding collectives keep their threads, so nothing can deadlock
    that did not before."""
    _here.active = True
    try:
        handle = start()
    finally:
        _here.active = False
    return synchronize(handle)


def poll(handle):
    """True once the collective finished (successfully or not)."""
    pending = _handles.get(handle)
    if pending is None:
        raise ValueError(f"Handle {handle} was not created or has been cleared.")
    return pending.future.done()


def synchronize(handle):
    """Waits for the collective and returns its output; raises its error."""
    pending = _handles.pop(handle, None)
    if pending is None:
        return None
    try:
        result = pending.future.result()
    except HorovodInternalError:
        raise
    except (ValueError, TypeError, NotImplementedError):
        raise
    except Exception as e:  # smb.Error and the like: the collective failed
        raise HorovodInternalError(str(e)) from e
    finally:
        with _lock:
            _reserved.discard(pending.key)
    return pending.finish(result)
