"""Real smbd processes for the smb package's tests (no mocks).

    with fabric.running(3) as servers:          # ["127.0.0.1:PORT", ...]
        client = smb.Client(servers=servers, timeout=5)

Fabric starts N smbd on loopback with port 0 and takes each port from its
ready line (``smbd ready on HOST:PORT``); stop() (also on any failure, at
exit, and -- through PR_SET_PDEATHSIG -- if this process dies without
cleaning up) kills every smbd it started, by pid. FabricTestCase runs one
fabric per TestCase class and bounds every test in time.

smbd is $SMB_SMBD (CTest sets it), else build/ci/smb-server/smbd of this
source tree. Without $PYTHONPATH pointing at the package, build/ci/python is
put on sys.path, so the tests also run by hand:

    /usr/bin/python3 plugins/python/tests/test_io.py -v
"""

import atexit
import contextlib
import ctypes
import faulthandler
import gc
import importlib
import itertools
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "..", "build", "ci"))

try:
    import smb  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(BUILD_DIR, "python"))
    import smb  # noqa: F401

#: Where the smb package was imported from (for child processes).
SMB_PYTHONPATH = os.path.dirname(os.path.dirname(os.path.abspath(smb.__file__)))

READY_PREFIX = "smbd ready on "
START_LIMIT = 30.0       # seconds an smbd may take to print its ready line
CLIENT_TIMEOUT = 5.0     # every client in the tests: the longest single wait
TEST_LIMIT = 90.0        # seconds one test may run before its traceback is dumped and it exits


def smbd_path():
    """$SMB_SMBD, else this tree's build/ci/smb-server/smbd."""
    return os.environ.get("SMB_SMBD") or os.path.join(BUILD_DIR, "smb-server", "smbd")


def optional_import(name):
    """The module `name`, or None when it cannot be imported."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


np = optional_import("numpy")
torch = optional_import("torch")

needs_numpy = unittest.skipIf(np is None, f"numpy is missing (cannot import numpy in {sys.executable})")
needs_torch = unittest.skipIf(torch is None, f"torch is missing (cannot import torch in {sys.executable})")

# ------------------------------------------------------------ smbd processes

_libc = ctypes.CDLL(None, use_errno=True)  # loaded before any fork
_PR_SET_PDEATHSIG = 1
_live = set()  # every Fabric with processes, for the atexit safety net


def _die_with_parent(parent):
    def preexec():
        # smbd gets SIGKILL if the thread that started it dies (a test killed by
        # CTest's timeout, a faulthandler exit): no smbd outlives the tests.
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)
    return preexec


class FabricError(RuntimeError):
    pass


class Fabric:
    """N smbd processes on loopback. A context manager; stop() is idempotent."""

    def __init__(self, count=1, capacity="256M", extra_args=()):
        self.count = count
        self.capacity = capacity
        self.extra_args = list(extra_args)
        self.servers = []       # "127.0.0.1:PORT", in start order
        self.procs = []
        self._logs = []         # (stdout file, stderr file) per process
        self._dir = None

    @property
    def server_list(self):
        """The servers as "h:p,h:p" (what $SMB_SERVERS holds)."""
        return ",".join(self.servers)

    def start(self):
        smbd = smbd_path()
        if not os.access(smbd, os.X_OK):
            raise FabricError(f"smbd not found at {smbd} (set SMB_SMBD or build the smbd target)")
        self._dir = tempfile.mkdtemp(prefix="smb-python-tests-")
        _live.add(self)
        try:
            for i in range(self.count):
                out = open(os.path.join(self._dir, f"smbd{i}.out"), "w+b")
                err = open(os.path.join(self._dir, f"smbd{i}.err"), "w+b")
                self._logs.append((out, err))
                self.procs.append(subprocess.Popen(
                    [smbd, "--listen", "127.0.0.1:0", "--capacity", self.capacity, *self.extra_args],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=err, preexec_fn=_die_with_parent(os.getpid())))
            for i in range(self.count):
                self.servers.append(self._wait_ready(i))
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, i):
        deadline = time.monotonic() + START_LIMIT
        proc, (out, _) = self.procs[i], self._logs[i]
        while True:
            out.seek(0)
            for line in out.read().decode(errors="replace").splitlines():
                if line.startswith(READY_PREFIX):
                    return line[len(READY_PREFIX):].strip()
            if proc.poll() is not None:
                raise FabricError(f"smbd {i} exited with {proc.returncode} before it was ready: {self.stderr(i)}")
            if time.monotonic() > deadline:
                raise FabricError(f"smbd {i} printed no ready line in {START_LIMIT} s: {self.stderr(i)}")
            time.sleep(0.01)

    def stderr(self, i, tail=2000):
        """The last `tail` characters smbd `i` wrote to stderr."""
        err = self._logs[i][1]
        err.flush()
        err.seek(0)
        return err.read().decode(errors="replace")[-tail:]

    def kill(self, i, sig=signal.SIGKILL):
        """Sends `sig` to smbd `i` (SIGKILL: a dead server) and reaps it."""
        proc = self.procs[i]
        if proc.poll() is None:
            proc.send_signal(sig)
            proc.wait(timeout=10)

    def start_spare(self):
        """Starts one more, empty smbd on a port of its own, not in `servers`: a replacement
        machine (Client.replace_server). Returns its address; stop() ends it with the rest."""
        i = len(self.procs)
        out = open(os.path.join(self._dir, f"smbd{i}.out"), "w+b")
        err = open(os.path.join(self._dir, f"smbd{i}.err"), "w+b")
        self._logs.append((out, err))
        self.procs.append(subprocess.Popen(
            [smbd_path(), "--listen", "127.0.0.1:0", "--capacity", self.capacity, *self.extra_args],
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, preexec_fn=_die_with_parent(os.getpid())))
        return self._wait_ready(i)

    def restart(self, i):
        """Kills smbd `i` and starts a fresh, empty one on its address: a crashed server that came back."""
        self.kill(i)
        out, err = self._logs[i]
        out.seek(0)
        out.truncate()
        self.procs[i] = subprocess.Popen(
            [smbd_path(), "--listen", self.servers[i], "--capacity", self.capacity, *self.extra_args],
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, preexec_fn=_die_with_parent(os.getpid()))
        self._wait_ready(i)

    def stop(self):
        """Kills every smbd of this fabric (by pid) and removes its logs."""
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    proc.kill()
                except OSError:
                    pass
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for out, err in self._logs:
            out.close()
            err.close()
        self._logs = []
        if self._dir is not None:
            for name in os.listdir(self._dir):
                os.unlink(os.path.join(self._dir, name))
            os.rmdir(self._dir)
            self._dir = None
        _live.discard(self)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


@atexit.register
def _stop_all():
    for fabric in list(_live):
        fabric.stop()


def child_env():
    """The environment of a child Python process that imports this smb package."""
    return dict(os.environ, PYTHONPATH=SMB_PYTHONPATH)


def run_python(code, *args, timeout=60):
    """Runs `code` in a new Python process (this interpreter, this smb
    package) with `args` as sys.argv[1:]; returns the CompletedProcess."""
    return subprocess.run([sys.executable, "-c", code, *args], env=child_env(), capture_output=True, text=True,
                          timeout=timeout)


@contextlib.contextmanager
def running(count=1, capacity="256M"):
    """Starts `count` smbd, yields their "host:port" list, always kills them."""
    with Fabric(count, capacity) as fabric:
        yield list(fabric.servers)


# ------------------------------------------------------------ test cases

_names = itertools.count()


class FabricTestCase(unittest.TestCase):
    """One fabric of SERVERS smbd for the whole class; self.client connects to
    it. Every test is bounded: after TEST_LIMIT seconds faulthandler dumps all
    threads' stacks and exits the process (its smbd die with it)."""

    SERVERS = 1
    CAPACITY = "256M"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.fabric = Fabric(cls.SERVERS, cls.CAPACITY)
        cls.addClassCleanup(cls.fabric.stop)
        cls.addClassCleanup(gc.collect)  # first: clients left in cycles close before their servers go
        cls.fabric.start()

    def setUp(self):
        super().setUp()
        faulthandler.dump_traceback_later(TEST_LIMIT, exit=True)
        self.addCleanup(faulthandler.cancel_dump_traceback_later)
        self.client = self.new_client()
        self.addCleanup(self.__dict__.pop, "client", None)

    def new_client(self, timeout=CLIENT_TIMEOUT, servers=None):
        return smb.Client(servers=servers or self.fabric.server_list, timeout=timeout)

    def unique_name(self, what="b"):
        """A buffer (or lock, barrier) name no other test of this run uses."""
        return f"{self._testMethodName}.{what}.{next(_names)}"

    def run_threads(self, targets, limit=60.0):
        """Runs each callable in its own thread; returns their results in
        order, re-raising the first exception. Fails if one is still running
        after `limit` seconds."""
        import threading
        results, errors = [None] * len(targets), [None] * len(targets)

        def body(i):
            try:
                results[i] = targets[i]()
            except BaseException as e:  # reported below, in the test's thread
                errors[i] = e

        threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(len(targets))]
        for t in threads:
            t.start()
        deadline = time.monotonic() + limit
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stuck = [i for i, t in enumerate(threads) if t.is_alive()]
        self.assertEqual(stuck, [], f"threads {stuck} still running after {limit} s")
        for e in errors:
            if e is not None:
                raise e
        return results


def main():
    unittest.main(verbosity=2)
