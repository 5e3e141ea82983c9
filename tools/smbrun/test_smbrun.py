#!/usr/bin/python3
"""Tests of smbrun against real smbd processes (no mocks).

Run by CTest (tools/smbrun/CMakeLists.txt, label `plugins`), one CTest test per
TestCase class, or by hand from the source tree:

    /usr/bin/python3 tools/smbrun/test_smbrun.py -v [ClassName[.test_name]]

Environment (CTest sets all three; by hand they default to build/ci's or
build/release's smbrun, smbd and smb-bench):
    SMBRUN     the smbrun under test
    SMB_SMBD   the smbd it starts (smbrun reads it itself)
    SMB_BENCH  smb-bench, run by the workers

Every smbrun run is bounded (RUN_LIMIT); afterwards each test checks that the
servers and workers of that launch are gone, by pid and by a marker that only
that launch's worker command lines carry.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
RUN_LIMIT = 60          # seconds any one smbrun may run in these tests
CAPACITY = "64M"        # per test server: small, the machine runs other builds


def find_build_binary(*parts):
    for preset in ("ci", "release"):
        path = os.path.join(SOURCE_ROOT, "build", preset, *parts)
        if os.access(path, os.X_OK):
            return path
    return None


SMBRUN = os.environ.get("SMBRUN") or find_build_binary("tools", "smbrun", "smbrun")
SMB_BENCH = os.environ.get("SMB_BENCH") or find_build_binary("tools", "smb-bench")


def smbrun_package_dir():
    """Where the smbrun under test finds the smb package (its wrapper's _PACKAGE_DIR)."""
    try:
        with open(SMBRUN, encoding="utf-8", errors="replace") as f:
            found = re.search(r'^_PACKAGE_DIR = "([^"]*)"', f.read(), re.M)
    except (OSError, TypeError):
        return None
    return found.group(1) if found and os.path.isdir(found.group(1)) else None


SMB_PACKAGE_DIR = smbrun_package_dir()
if not os.environ.get("SMB_SMBD"):
    found = find_build_binary("smb-server", "smbd")
    if found:
        os.environ["SMB_SMBD"] = found


# ---------------------------------------------------------------- helpers

def proc_state(pid):
    """The state letter of a process, or None when there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2:][:1].decode()


def pid_alive(pid):
    return proc_state(pid) not in (None, "Z", "X")


def pids_with_marker(marker):
    """Live processes whose command line contains marker (like pgrep -f)."""
    found = []
    mine = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == mine:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if marker.encode() in cmdline and pid_alive(int(entry)):
            found.append((int(entry), cmdline.replace(b"\0", b" ").decode(errors="replace")))
    return found


def refuses_connections(addr):
    host, _, port = addr.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return False
    except OSError:
        return True


def wait_until(predicate, seconds, step=0.05):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


class Run:
    """One smbrun process; its stdout/stderr go to files (a surviving worker
    holding a pipe could otherwise hang the test)."""

    def __init__(self, tmp, args, env=None, drop_env=()):
        self.args = [SMBRUN] + list(args)
        self.out_path = os.path.join(tmp, f"smbrun-{uuid.uuid4().hex[:8]}.out")
        self.err_path = self.out_path[:-4] + ".err"
        full_env = {k: v for k, v in os.environ.items() if k not in drop_env}
        full_env.update(env or {})
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.popen = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=err, env=full_env)
        self.started = time.monotonic()
        self.code = None
        self.elapsed = None

    def wait(self, limit=RUN_LIMIT):
        try:
            self.code = self.popen.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
            raise AssertionError(f"smbrun did not finish within {limit} s: {self.args}\n"
                                 f"stderr:\n{self.stderr}")
        self.elapsed = time.monotonic() - self.started
        return self.code

    @property
    def stdout(self):
        with open(self.out_path, "rb") as f:
            return f.read().decode(errors="replace")

    @property
    def stderr(self):
        with open(self.err_path, "rb") as f:
            return f.read().decode(errors="replace")

    def server_pids(self):
        """(pid, address) of the servers in SMB_SERVERS order, from -v's ready lines
        (which come in the order the servers got ready)."""
        found = sorted((int(m.group(1)), int(m.group(2)), m.group(3)) for m in
                       re.finditer(r"server (\d+): smbd pid (\d+) ready on (\S+):", self.stderr))
        return [(pid, addr) for _, pid, addr in found]

    def worker_pids(self):
        return {int(m.group(1)): int(m.group(2))
                for m in re.finditer(r"rank (\d+): pid (\d+):", self.stderr)}


class SmbrunTestCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="smbrun-test-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.marker = f"smbrun-test-marker-{uuid.uuid4().hex}"
        self.runs = []
        self.addCleanup(self.kill_leftovers)

    def kill_leftovers(self):
        """Whatever a failed test left behind must not outlive it."""
        for run in self.runs:
            if run.popen.poll() is None:
                run.popen.kill()
                run.popen.wait()
        for pid, _ in pids_with_marker(self.marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def smbrun(self, *args, env=None, drop_env=()):
        run = Run(self.tmp, args, env, drop_env)
        self.runs.append(run)
        return run

    def run_smbrun(self, *args, env=None, drop_env=(), limit=RUN_LIMIT):
        run = self.smbrun(*args, env=env, drop_env=drop_env)
        run.wait(limit)
        return run

    def worker(self, code):
        """A worker command: Python code, tagged with this test's marker."""
        return [PYTHON, "-c", code, self.marker]

    def assert_nothing_left(self, run):
        """No server and no worker (nor a worker's child) of this launch remains."""
        servers = run.server_pids()
        for pid, addr in servers:
            self.assertTrue(wait_until(lambda: not pid_alive(pid), 5),
                            f"smbd pid {pid} ({addr}) still running after smbrun exited")
            self.assertTrue(refuses_connections(addr), f"something still listens on {addr}")
        for rank, pid in run.worker_pids().items():
            self.assertTrue(wait_until(lambda: not pid_alive(pid), 5),
                            f"rank {rank} (pid {pid}) still running after smbrun exited")
        self.assertTrue(wait_until(lambda: not pids_with_marker(self.marker), 5),
                        f"processes of this launch remain: {pids_with_marker(self.marker)}")

    def assert_failed_fast(self, run, limit=10):
        self.assertNotEqual(run.code, 0, run.stderr)
        self.assertLess(run.elapsed, limit, f"smbrun took {run.elapsed:.1f} s\n{run.stderr}")


def read_env_file(path):
    env = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            name, sep, value = line.rstrip("\n").partition("=")
            if sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                env[name] = value
    return env


# ---------------------------------------------------------------- tests

class UsageTest(SmbrunTestCase):
    def test_help(self):
        run = self.run_smbrun("--help")
        self.assertEqual(run.code, 0, run.stderr)
        for word in ("-np", "--local-servers", "--capacity", "--servers", "-H", "--tag-output",
                     "--smbd", "--timeout", "SMB_SERVERS", "SMB_JOB_ID", "RANK", "WORLD_SIZE",
                     "LOCAL_RANK", "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "exit status"):
            self.assertIn(word, run.stdout)

    def test_bad_usage_exits_2(self):
        cases = [
            [],                                             # no command
            ["-np", "2"],                                   # no command
            ["--", "true"],                                 # no -np
            ["-np", "0", "--", "true"],
            ["-np", "x", "--", "true"],
            ["-np", "2", "--servers", "127.0.0.1:1", "--local-servers", "2", "--", "true"],
            ["-np", "2", "--servers", "nonsense", "--", "true"],
            ["-np", "2", "-H", "a:0", "--", "true"],
            ["-np", "2", "--no-such-option", "--", "true"],
            ["-np", "2", "--capacity", "lots", "--", "true"],
            ["-np", "2", "--timeout", "-1", "--", "true"],
        ]
        for args in cases:
            with self.subTest(args=args):
                run = self.run_smbrun(*args)
                self.assertEqual(run.code, 2, run.stderr)
                self.assertIn("smbrun: error:", run.stderr)
                self.assertNotIn("Traceback", run.stderr)

    def test_command_not_found(self):
        run = self.run_smbrun("-v", "-np", "2", "--capacity", CAPACITY, "--",
                              os.path.join(self.tmp, "no-such-command"))
        self.assertEqual(run.code, 127, run.stderr)
        self.assertIn("no-such-command", run.stderr)
        self.assertEqual(len(run.server_pids()), 1, run.stderr)
        self.assert_nothing_left(run)


class LocalJobTest(SmbrunTestCase):
    @unittest.skipUnless(SMB_BENCH, "smb-bench not found: set SMB_BENCH")
    def test_four_workers_two_servers_write_and_read(self):
        # Each rank writes its own buffer w$RANK (striped over both servers),
        # then reads and verifies the next rank's once that one is written.
        script = r'''
set -e
env > "$OUT/env.$RANK.tmp"; mv "$OUT/env.$RANK.tmp" "$OUT/env.$RANK"
"$SMB_BENCH" --op write --size 1M --block 64K --stripe-unit 256K --verify --keep --name "w$RANK" \
    > "$OUT/write.$RANK.log" 2>&1
touch "$OUT/written.$RANK"
peer=$(( (RANK + 1) % WORLD_SIZE ))
i=0
while [ ! -e "$OUT/written.$peer" ]; do
  i=$((i + 1)); [ $i -lt 400 ] || { echo "rank $RANK: rank $peer never wrote" >&2; exit 9; }
  sleep 0.05
done
"$SMB_BENCH" --op read --size 1M --block 64K --verify --name "w$peer" > "$OUT/read.$RANK.log" 2>&1
'''
        run = self.run_smbrun("-v", "-np", "4", "--local-servers", "2", "--capacity", CAPACITY,
                              "-x", f"OUT={self.tmp}", "--", "sh", "-c", script, self.marker,
                              env={"SMB_BENCH": SMB_BENCH})
        logs = ""
        for name in sorted(os.listdir(self.tmp)):
            if name.endswith(".log"):
                with open(os.path.join(self.tmp, name), errors="replace") as f:
                    logs += f"\n--- {name}:\n{f.read()}"
        self.assertEqual(run.code, 0, run.stderr + logs)

        servers = run.server_pids()
        self.assertEqual(len(servers), 2, run.stderr)
        expected_servers = ",".join(addr for _, addr in servers)
        envs = [read_env_file(os.path.join(self.tmp, f"env.{rank}")) for rank in range(4)]
        job_ids = {env["SMB_JOB_ID"] for env in envs}
        self.assertEqual(len(job_ids), 1, job_ids)
        self.assertRegex(job_ids.pop(), r"^[0-9a-f]{8,}$")
        master_ports = {env["MASTER_PORT"] for env in envs}
        self.assertEqual(len(master_ports), 1)
        self.assertTrue(0 < int(master_ports.pop()) < 65536)
        for rank, env in enumerate(envs):
            with self.subTest(rank=rank):
                self.assertEqual(env["SMB_SERVERS"], expected_servers)
                for name, value in (("RANK", rank), ("SMB_RANK", rank), ("LOCAL_RANK", rank),
                                    ("SMB_LOCAL_RANK", rank), ("WORLD_SIZE", 4), ("SMB_SIZE", 4),
                                    ("LOCAL_WORLD_SIZE", 4), ("SMB_LOCAL_SIZE", 4),
                                    ("GROUP_RANK", 0), ("MASTER_ADDR", "127.0.0.1"),
                                    ("HOROVOD_RANK", rank), ("HOROVOD_SIZE", 4),
                                    ("HOROVOD_LOCAL_RANK", rank), ("HOROVOD_LOCAL_SIZE", 4),
                                    ("HOROVOD_CROSS_RANK", 0), ("HOROVOD_CROSS_SIZE", 1),
                                    ("OUT", self.tmp)):
                    self.assertEqual(env.get(name), str(value), name)
                with open(os.path.join(self.tmp, f"write.{rank}.log")) as f:
                    write_log = f.read()
                self.assertIn(f"write on 'w{rank}', created", write_log)
                self.assertIn("over 2 server(s)", write_log)
                self.assertIn("verify     ok", write_log)
                with open(os.path.join(self.tmp, f"read.{rank}.log")) as f:
                    read_log = f.read()
                self.assertIn(f"read on 'w{(rank + 1) % 4}'", read_log)
                self.assertIn("verify     ok", read_log)
        self.assert_nothing_left(run)

    def test_each_launch_gets_its_own_job_id(self):
        ids = []
        for _ in range(2):
            run = self.run_smbrun("-np", "1", "--capacity", CAPACITY, "--",
                                  "sh", "-c", 'echo "id=$SMB_JOB_ID"')
            self.assertEqual(run.code, 0, run.stderr)
            ids.append(re.search(r"id=(\S+)", run.stdout).group(1))
        self.assertNotEqual(ids[0], ids[1])

    def test_tag_output(self):
        run = self.run_smbrun("--tag-output", "-np", "2", "--capacity", CAPACITY, "--",
                              "sh", "-c", 'echo "out of $RANK"; echo "err of $RANK" >&2; printf "tail $RANK"')
        self.assertEqual(run.code, 0, run.stderr)
        for rank in range(2):
            self.assertIn(f"[{rank}] out of {rank}\n", run.stdout)
            self.assertIn(f"[{rank}] tail {rank}\n", run.stdout)
            self.assertIn(f"[{rank}] err of {rank}\n", run.stderr)
        for line in run.stdout.splitlines():
            self.assertRegex(line, r"^\[[01]\] ")

    def test_untagged_output_is_inherited(self):
        run = self.run_smbrun("-np", "2", "--capacity", CAPACITY, "--", "sh", "-c", 'echo "hello $RANK"')
        self.assertEqual(run.code, 0, run.stderr)
        self.assertEqual(sorted(run.stdout.splitlines()), ["hello 0", "hello 1"])

    def test_existing_servers(self):
        # --servers: smbrun starts none and passes the list on.
        first = self.smbrun("-v", "-np", "1", "--capacity", CAPACITY, "--",
                            *self.worker("import os, time\n"
                                         "print(os.environ['SMB_SERVERS'], flush=True)\n"
                                         "time.sleep(60)"))
        self.assertTrue(wait_until(lambda: first.stdout.strip(), 20), first.stderr)
        servers = first.stdout.strip()
        second = self.run_smbrun("-v", "-np", "2", "--servers", servers, "--",
                                 "sh", "-c", 'echo "$RANK $SMB_SERVERS"')
        self.assertEqual(second.code, 0, second.stderr)
        self.assertEqual(sorted(second.stdout.splitlines()), [f"0 {servers}", f"1 {servers}"])
        self.assertEqual(second.server_pids(), [])
        first.popen.send_signal(signal.SIGTERM)
        first.wait(15)
        self.assert_nothing_left(first)

    @unittest.skipUnless(SMB_PACKAGE_DIR, "smbrun's smb package not found")
    def test_prints_the_groups_smb_torch_forms(self):
        # The line must say what smb.torch does: each worker reports the
        # group (cross_rank) that smb.collective.basics gives it.
        code = ("import sys\n"
                f"sys.path.insert(0, {SMB_PACKAGE_DIR!r})\n"
                "from smb.collective.basics import _topology\n"
                "rank, _, _, _, group = _topology(None, None, None, None)\n"
                "print(f'rank {rank} group {group}', flush=True)\n")
        default = "4 workers in 1 group (all local ranks; set SMB_TORCH_GROUP_SIZE=N for groups of N)"
        cases = [
            ({}, [], default, [[0, 1, 2, 3]]),
            ({"SMB_TORCH_GROUP_SIZE": "2"}, [],
             "4 workers in 2 groups of 2 (SMB_TORCH_GROUP_SIZE=2): [0,1] [2,3]", [[0, 1], [2, 3]]),
            ({"SMB_TORCH_GROUP_SIZE": "2"}, ["-x", "SMB_TORCH_GROUP_SIZE=1"],   # -x wins
             "4 workers in 4 groups of 1 (SMB_TORCH_GROUP_SIZE=1): [0] [1] [2] [3]", [[0], [1], [2], [3]]),
            ({"SMB_TORCH_GROUP_SIZE": "3"}, [],                                 # no divisor: ignored
             "4 workers in 1 group (all local ranks; SMB_TORCH_GROUP_SIZE=3 ignored: not a positive "
             "divisor of 4)", [[0, 1, 2, 3]]),
        ]
        for env, extra, line, groups in cases:
            with self.subTest(env=env, extra=extra):
                run = self.run_smbrun("-np", "4", "--capacity", CAPACITY, *extra, "--", *self.worker(code),
                                      env=env, drop_env=("SMB_TORCH_GROUP_SIZE",))
                self.assertEqual(run.code, 0, run.stderr)
                printed = [l for l in run.stderr.splitlines() if " group" in l and l.startswith("smbrun: ")]
                self.assertEqual(printed, [f"smbrun: {line}"], run.stderr)
                formed = {}
                for m in re.finditer(r"rank (\d+) group (\d+)", run.stdout):
                    formed.setdefault(int(m.group(2)), []).append(int(m.group(1)))
                self.assertEqual(sorted(sorted(g) for g in formed.values()), groups, run.stdout)

    def test_finds_smbd_in_its_build_tree(self):
        smbd = os.path.join(os.path.dirname(os.path.realpath(SMBRUN)), "..", "..", "smb-server", "smbd")
        if not os.access(smbd, os.X_OK):
            self.skipTest(f"{SMBRUN} is not in a build tree")
        run = self.run_smbrun("-v", "-np", "1", "--capacity", CAPACITY, "--", "true",
                              drop_env=("SMB_SMBD",))
        self.assertEqual(run.code, 0, run.stderr)
        self.assertIn(os.path.normpath(smbd), run.stderr)


class JobCredentialTest(SmbrunTestCase):
    """With the servers' secret in SMB_AUTH_TOKEN_FILE, the workers get a
    credential for their job's names only (docs/reliability.md, "Per-job
    credentials"), removed when the job ends."""

    def setUp(self):
        super().setUp()
        self.secret = os.path.join(self.tmp, "secret")
        fd = os.open(self.secret, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"a fabric's shared secret\n")
        os.close(fd)

    def run_job(self, *extra):
        script = r'''
echo "file=$SMB_AUTH_TOKEN_FILE prefix=$SMB_NAME_PREFIX"
"$SMB_BENCH" --op write --size 64K --block 64K --keep --name "${SMB_NAME_PREFIX}w" > "$OUT/own.log" 2>&1 ||
  { echo "own-prefix write failed"; cat "$OUT/own.log"; exit 7; }
if "$SMB_BENCH" --op write --size 64K --block 64K --name "other-team/w" > "$OUT/other.log" 2>&1; then
  echo "other=written"
else
  echo "other=refused"; cat "$OUT/other.log"
fi
'''
        return self.run_smbrun("-np", "1", "--capacity", CAPACITY, f"--smbd-arg=--auth-token-file={self.secret}",
                               *extra, "-x", f"OUT={self.tmp}", "--", "sh", "-c", script, self.marker,
                               env={"SMB_BENCH": SMB_BENCH, "SMB_AUTH_TOKEN_FILE": self.secret})

    @unittest.skipUnless(SMB_BENCH, "smb-bench not found: set SMB_BENCH")
    def test_workers_get_their_jobs_names_only(self):
        run = self.run_job()
        self.assertEqual(run.code, 0, run.stdout + run.stderr)
        found = re.search(r"file=(\S+) prefix=(\S+)", run.stdout)
        self.assertIsNotNone(found, run.stdout)
        path, prefix = found.groups()
        self.assertNotEqual(path, self.secret, "the workers got the shared secret itself")
        self.assertRegex(prefix, r"^hvd/smb-[0-9a-f]+/$")
        self.assertIn("other=refused", run.stdout)
        self.assertIn("outside this client's credential", run.stdout)
        self.assertFalse(os.path.exists(path), "the job's credential outlived the job")

    @unittest.skipUnless(SMB_BENCH, "smb-bench not found: set SMB_BENCH")
    def test_no_job_credential_hands_over_the_secret(self):
        run = self.run_job("--no-job-credential")
        self.assertEqual(run.code, 0, run.stdout + run.stderr)
        self.assertIn(f"file={self.secret} prefix=", run.stdout)
        self.assertIn("other=written", run.stdout)


class FailureTest(SmbrunTestCase):
    def test_killed_worker_stops_everything(self):
        # Rank 1 SIGKILLs itself; the others sleep (each with a child of its
        # own, which must be stopped too: the worker's process group).
        code = ("import os, signal, subprocess, sys, time\n"
                "marker = sys.argv[1]\n"
                "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', marker])\n"
                "if os.environ['RANK'] == '1':\n"
                "    time.sleep(1.0)\n"
                "    os.kill(os.getpid(), signal.SIGKILL)\n"
                "time.sleep(60)\n")
        run = self.run_smbrun("-v", "-np", "4", "--local-servers", "2", "--capacity", CAPACITY,
                              "--", *self.worker(code))
        self.assert_failed_fast(run)
        self.assertEqual(run.code, 128 + signal.SIGKILL, run.stderr)
        self.assertRegex(run.stderr, r"rank 1 \(pid \d+\) was killed by signal 9")
        self.assertEqual(len(run.server_pids()), 2, run.stderr)
        self.assertEqual(len(run.worker_pids()), 4, run.stderr)
        self.assert_nothing_left(run)

    def test_exit_code_is_passed_on(self):
        code = ("import os, sys, time\n"
                "if os.environ['RANK'] == '2':\n"
                "    time.sleep(0.5)\n"
                "    sys.exit(3)\n"
                "time.sleep(60)\n")
        run = self.run_smbrun("-v", "-np", "4", "--capacity", CAPACITY, "--", *self.worker(code))
        self.assert_failed_fast(run)
        self.assertEqual(run.code, 3, run.stderr)
        self.assertIn("rank 2", run.stderr)
        self.assertIn("exited with code 3", run.stderr)
        self.assert_nothing_left(run)

    def test_worker_ignoring_sigterm_gets_sigkill(self):
        code = ("import os, signal, sys, time\n"
                "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "if os.environ['RANK'] == '1':\n"
                "    time.sleep(0.5)\n"
                "    sys.exit(5)\n"
                "time.sleep(60)\n")
        run = self.run_smbrun("-v", "--grace", "1", "-np", "2", "--capacity", CAPACITY, "--",
                              *self.worker(code))
        self.assert_failed_fast(run)
        self.assertEqual(run.code, 5, run.stderr)
        self.assertIn("SIGKILL", run.stderr)
        self.assert_nothing_left(run)

    def _started_job(self, sig_ignoring=False):
        code = ("import os, sys, time\n"
                "open(os.path.join(os.environ['OUT'], 'up.' + os.environ['RANK']), 'w').close()\n"
                "time.sleep(60)\n")
        run = self.smbrun("-v", "-np", "3", "--local-servers", "2", "--capacity", CAPACITY,
                          "-x", f"OUT={self.tmp}", "--", *self.worker(code))
        up = lambda: all(os.path.exists(os.path.join(self.tmp, f"up.{r}")) for r in range(3))
        self.assertTrue(wait_until(up, 30), f"workers did not start:\n{run.stderr}")
        return run

    def test_sigterm_stops_workers_and_servers(self):
        run = self._started_job()
        run.popen.send_signal(signal.SIGTERM)
        run.wait(15)
        self.assert_failed_fast(run, limit=60)
        self.assertEqual(run.code, 128 + signal.SIGTERM, run.stderr)
        self.assertIn("SIGTERM", run.stderr)
        self.assertEqual(len(run.server_pids()), 2, run.stderr)
        self.assert_nothing_left(run)

    def test_sigint_stops_workers_and_servers(self):
        run = self._started_job()
        start = time.monotonic()
        run.popen.send_signal(signal.SIGINT)
        run.wait(15)
        self.assertLess(time.monotonic() - start, 10)
        self.assertEqual(run.code, 128 + signal.SIGINT, run.stderr)
        self.assert_nothing_left(run)

    def test_timeout_bounds_the_job(self):
        run = self.run_smbrun("-v", "--timeout", "2", "-np", "2", "--capacity", CAPACITY, "--",
                              *self.worker("import time; time.sleep(60)"))
        self.assert_failed_fast(run)
        self.assertEqual(run.code, 124, run.stderr)
        self.assertIn("--timeout", run.stderr)
        self.assert_nothing_left(run)

    def test_server_dying_stops_the_job(self):
        code = ("import os, time\n"
                "open(os.path.join(os.environ['OUT'], 'up'), 'w').close()\n"
                "time.sleep(60)\n")
        run = self.smbrun("-v", "-np", "1", "--capacity", CAPACITY, "-x", f"OUT={self.tmp}", "--",
                          *self.worker(code))
        self.assertTrue(wait_until(lambda: os.path.exists(os.path.join(self.tmp, "up")), 30), run.stderr)
        (pid, _), = run.server_pids()
        os.kill(pid, signal.SIGKILL)
        run.wait(15)
        self.assertEqual(run.code, 1, run.stderr)
        self.assertIn("while the job ran", run.stderr)
        self.assert_nothing_left(run)


class ServerStartTest(SmbrunTestCase):
    def test_smbd_exiting_without_ready_line(self):
        run = self.run_smbrun("--smbd", "/bin/false", "-np", "2", "--", *self.worker("pass"))
        self.assert_failed_fast(run)
        self.assertEqual(run.code, 1, run.stderr)
        self.assertIn("/bin/false --listen 127.0.0.1:0 --capacity 1G", run.stderr)
        self.assertIn("exited with code 1 before printing its ready line", run.stderr)
        self.assertNotIn("Traceback", run.stderr)
        self.assertEqual(pids_with_marker(self.marker), [])   # no worker started

    def test_missing_smbd(self):
        missing = os.path.join(self.tmp, "no-smbd")
        run = self.run_smbrun("--smbd", missing, "-np", "1", "--", "true")
        self.assertEqual(run.code, 1, run.stderr)
        self.assertIn(missing, run.stderr)
        self.assertIn("No such file", run.stderr)

    def test_smbd_silent_past_the_server_timeout(self):
        # A fake smbd that complains on stderr and never prints a ready line.
        fake = os.path.join(self.tmp, "fake-smbd")
        with open(fake, "w") as f:
            f.write(f"#!/bin/sh\necho 'fake smbd: cannot reach the pool' >&2\n"
                    f"exec {PYTHON} -c 'import time; time.sleep(60)' {self.marker}\n")
        os.chmod(fake, 0o755)
        run = self.run_smbrun("--smbd", fake, "--server-timeout", "1", "--local-servers", "2",
                              "-np", "1", "--", *self.worker("pass"))
        self.assert_failed_fast(run)
        self.assertEqual(run.code, 1, run.stderr)
        self.assertIn(f"{fake} --listen 127.0.0.1:0", run.stderr)
        self.assertIn("no ready line within 1 s", run.stderr)
        self.assertIn("fake smbd: cannot reach the pool", run.stderr)
        # the fake servers (exec'd in place of the script) were stopped
        self.assertTrue(wait_until(lambda: not pids_with_marker(self.marker), 5),
                        f"left behind: {pids_with_marker(self.marker)}")

    def test_real_smbd_error_is_shown(self):
        run = self.run_smbrun("--capacity", "0", "-np", "1", "--", *self.worker("pass"))
        self.assertEqual(run.code, 1, run.stderr)
        self.assertIn("--capacity 0", run.stderr)
        self.assertIn("greater than zero", run.stderr)   # smbd's own message
        self.assertIn("before printing its ready line", run.stderr)
        self.assertIn("its stderr:", run.stderr)


class MpirunTest(SmbrunTestCase):
    def setUp(self):
        super().setUp()
        if not shutil.which("mpirun"):
            print("SKIP: mpirun not found (Debian: apt-get install openmpi-bin)", flush=True)
            self.skipTest("mpirun not found (Debian: apt-get install openmpi-bin)")

    def test_two_ranks_through_mpirun(self):
        script = 'env > "$OUT/env.$OMPI_COMM_WORLD_RANK"'
        run = self.run_smbrun("-v", "-H", "localhost:2", "--capacity", CAPACITY,
                              "-x", f"OUT={self.tmp}", "--", "sh", "-c", script, self.marker)
        self.assertEqual(run.code, 0, run.stdout + run.stderr)
        (_, server), = run.server_pids()
        self.assertIn("mpirun", run.stderr)
        job_ids = set()
        for rank in range(2):
            with self.subTest(rank=rank):
                env = read_env_file(os.path.join(self.tmp, f"env.{rank}"))
                self.assertEqual(env.get("OMPI_COMM_WORLD_RANK"), str(rank))
                self.assertEqual(env.get("OMPI_COMM_WORLD_SIZE"), "2")
                self.assertEqual(env.get("SMB_SERVERS"), server)
                self.assertEqual(env.get("WORLD_SIZE"), "2")
                self.assertEqual(env.get("MASTER_ADDR"), "127.0.0.1")
                self.assertNotIn("RANK", env)
                job_ids.add(env.get("SMB_JOB_ID"))
        self.assertEqual(len(job_ids), 1)
        self.assertTrue(job_ids.pop())
        self.assert_nothing_left(run)

    def test_failing_rank_through_mpirun(self):
        code = ("import os, sys, time\n"
                "if os.environ['OMPI_COMM_WORLD_RANK'] == '1':\n"
                "    time.sleep(0.5)\n"
                "    sys.exit(3)\n"
                "time.sleep(60)\n")
        run = self.run_smbrun("-v", "-H", "localhost:2", "--capacity", CAPACITY, "--",
                              *self.worker(code))
        self.assert_failed_fast(run, limit=20)
        self.assertEqual(run.code, 3, run.stdout + run.stderr)
        self.assert_nothing_left(run)

    def test_sigterm_through_mpirun(self):
        code = ("import os, time\n"
                "open(os.path.join(os.environ['OUT'], 'up.' + os.environ['OMPI_COMM_WORLD_RANK']),"
                " 'w').close()\n"
                "time.sleep(60)\n")
        run = self.smbrun("-v", "-H", "localhost:2", "--capacity", CAPACITY, "-x", f"OUT={self.tmp}",
                          "--", *self.worker(code))
        up = lambda: all(os.path.exists(os.path.join(self.tmp, f"up.{r}")) for r in range(2))
        self.assertTrue(wait_until(up, 30), run.stdout + run.stderr)
        run.popen.send_signal(signal.SIGTERM)
        run.wait(20)
        self.assertNotEqual(run.code, 0)
        self.assert_nothing_left(run)


if __name__ == "__main__":
    unittest.main()
