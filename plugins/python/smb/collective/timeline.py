"""The timeline: a Chrome-trace JSON of every collective's phases, readable
in chrome://tracing or Perfetto (Horovod's HOROVOD_TIMELINE; SMB_TIMELINE
too). Rank 0 writes it, as Horovod's does. Each collective name is a
"process" in the trace; its phases are nested spans:

  QUEUE            submitted, waiting for a worker thread
  NEGOTIATE_<OP>   its metadata written, waiting for every rank's
  WRITE            its input into the fabric (one-sided)
  SERVER_OP        the servers reduce (reductions)
  WAIT             waiting for every rank's contribution (notified)
  READ             the result out of the fabric

The file is a JSON array that stays valid after every event: each write
replaces the closing bracket.
"""

import contextlib
import json
import os
import threading
import time

_lock = threading.Lock()
_writer = None
_current = threading.local()


class _Writer:
    def __init__(self, path, mark_cycles):
        self.path = path
        self.mark_cycles = mark_cycles
        self.start = time.time()
        self.file = open(path, "w")  # noqa: SIM115 - held open until stop_timeline
        self.file.write("[]")
        self.first = True
        self.pids = {}
        self.event({"name": "process_name", "ph": "M", "pid": 0,
                    "args": {"start_time_since_epoch_in_micros": int(self.start * 1e6)}})
        self.event({"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}})

    def now(self):
        return int((time.time() - self.start) * 1e6)

    def event(self, event):
        text = json.dumps(event, separators=(",", ":"))
        self.file.seek(self.file.tell() - 1)  # over the closing bracket
        self.file.write(("" if self.first else ",\n") + text + "]")
        self.file.flush()
        self.first = False

    def pid(self, name):
        pid = self.pids.get(name)
        if pid is None:
            pid = self.pids[name] = len(self.pids) + 1
            self.event({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}})
            self.event({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}})
        return pid

    def close(self):
        self.file.close()


def _emit(event):
    with _lock:
        if _writer is not None:
            event["ts"] = _writer.now()
            if "pid" in event and isinstance(event["pid"], str):
                event["pid"] = _writer.pid(event["pid"])
            _writer.event(event)


def start_timeline(file_path, mark_cycles=False):
    """Starts writing the timeline to `file_path` (rank 0; a no-op elsewhere)."""
    global _writer
    from . import basics
    if basics.state().rank != 0:
        return
    with _lock:
        if _writer is not None and _writer.path == file_path:
            return
        if _writer is not None:
            _writer.close()
        _writer = _Writer(file_path, mark_cycles)


def stop_timeline():
    """Stops writing the timeline (the file stays valid JSON)."""
    global _writer
    with _lock:
        if _writer is not None:
            _writer.close()
            _writer = None


def start_from_environment():
    path = os.environ.get("SMB_TIMELINE") or os.environ.get("HOROVOD_TIMELINE")
    if path and path != "DYNAMIC":
        start_timeline(path, os.environ.get("HOROVOD_TIMELINE_MARK_CYCLES", "0") not in ("", "0"))


class Record:
    def __init__(self, name, kind):
        self.name = name
        self.kind = kind


def recording():
    """Whether a timeline is being written (a hot path can skip its phases)."""
    return _writer is not None


def begin(name, kind):
    """A collective was submitted: its QUEUE span starts."""
    if _writer is None:
        return None
    record = Record(name, kind)
    _emit({"ph": "B", "name": "QUEUE", "pid": name})
    return record


def end(record, args=None):
    if record is not None:
        _emit({"ph": "E", "pid": record.name, "args": args or {}})


@contextlib.contextmanager
def running(record):
    """The worker thread took the collective: QUEUE ends, the op's span starts."""
    previous = getattr(_current, "record", None)
    _current.record = record
    if record is not None:
        _emit({"ph": "E", "pid": record.name})
        _emit({"ph": "B", "name": record.kind, "pid": record.name})
    try:
        yield
    finally:
        _current.record = previous


@contextlib.contextmanager
def phase(name):
    """A span inside the collective this thread runs (no-op without a timeline)."""
    record = getattr(_current, "record", None)
    if record is None or _writer is None:
        yield
        return
    _emit({"ph": "B", "name": name, "pid": record.name})
    try:
        yield
    finally:
        _emit({"ph": "E", "pid": record.name})
