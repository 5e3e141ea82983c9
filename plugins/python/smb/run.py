"""smbrun: start memory servers and N workers, supervise them, clean up.

A launcher in the manner of horovodrun and torchrun, for Soft Memory Box jobs:
`smbrun ...` or `python3 -m smb.run ...`. Run `smbrun --help` for the
interface; tools/smbrun/test_smbrun.py tests it. Standard library only.
"""

import argparse
import ctypes
import os
import re
import selectors
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

PROG = "smbrun"

# Exit statuses of smbrun itself (a failed worker's own status is passed on).
EXIT_SETUP = 1        # servers did not start, mpirun/command not found, a server died
EXIT_USAGE = 2        # bad command line
EXIT_TIMEOUT = 124    # --timeout expired (as timeout(1))

DEFAULT_CAPACITY = "1G"
DEFAULT_GRACE = 3.0
DEFAULT_SERVER_TIMEOUT = 30.0
READY_RE = re.compile(rb"smbd ready on (\S+)[ \t\r]*\n")
READY_EOF_RE = re.compile(rb"smbd ready on (\S+)\s*$")

# Variables smbrun sets per rank; never inherited from smbrun's own environment
# under mpirun (where Open MPI numbers the ranks).
RANK_VARS = ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
             "ROLE_RANK", "ROLE_WORLD_SIZE", "SMB_RANK", "SMB_LOCAL_RANK", "SMB_LOCAL_SIZE",
             "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
             "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE")

DESCRIPTION = """\
Launch a Soft Memory Box job: start memory servers (smbd), run N worker
processes of COMMAND with the fabric's and torchrun's environment, supervise
them, and stop everything it started when the job ends.
"""

EPILOG = """\
servers:
  By default smbrun starts one local smbd (--local-servers 1 --capacity 1G):
  each as `smbd --listen HOST:0 --capacity SIZE [SMBD-ARGS]`, HOST being
  --listen-host (default 127.0.0.1; with -H and a remote host, this host's
  address on the route to it). smbrun waits for every `smbd ready on
  HOST:PORT` line (at most --server-timeout seconds) and fails with the
  command and its stderr when one does not come. --capacity is per server.
  smbd's stderr goes to a log file (--server-logs DIR keeps them; otherwise
  they are removed, and shown only when a server fails). --servers LIST uses
  running servers instead and starts none.
  smbd is found by --smbd, else $SMB_SMBD, else next to smbrun in a build
  tree (BUILD/tools/smbrun/smbrun -> BUILD/smb-server/smbd) or an install
  (bin/smbd), else on PATH.

environment of each worker (local launch):
  SMB_SERVERS       host:port,... of the servers
  SMB_JOB_ID        unique id of this launch (namespace for the job's buffers)
  RANK, SMB_RANK                    0 .. N-1
  WORLD_SIZE, SMB_SIZE              N
  LOCAL_RANK, SMB_LOCAL_RANK        rank on this host (= RANK)
  LOCAL_WORLD_SIZE, SMB_LOCAL_SIZE  workers on this host (= N)
  GROUP_RANK=0, GROUP_WORLD_SIZE=1, ROLE_RANK, ROLE_WORLD_SIZE (as torchrun)
  HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK, HOROVOD_LOCAL_SIZE,
  HOROVOD_CROSS_RANK=0, HOROVOD_CROSS_SIZE=1 (as horovodrun)
  MASTER_ADDR=127.0.0.1, MASTER_PORT  a free port chosen by smbrun
  plus smbrun's own environment and every -x NAME=VALUE.
  Rank 0 inherits smbrun's stdin, the others read /dev/null.
  smb.torch's groups (its hybrid modes average inside a group every step):
  all the ranks of a host, so one group here, unless SMB_TORCH_GROUP_SIZE=G
  (G dividing the number of workers) makes groups of G consecutive ranks.
  smbrun prints the groups at start.

per-job credentials:
  Where $SMB_AUTH_TOKEN_FILE holds the servers' shared secret (smbd
  --auth-token-file), the workers get instead, as SMB_AUTH_TOKEN_FILE, a
  credential for the names starting hvd/smb-JOB/ only (the namespace of
  smb.torch's buffers), and that prefix as SMB_NAME_PREFIX: buffers a script
  makes itself must start with it. The servers refuse any other name with
  permission_denied, so one job cannot read or overwrite another's. It lasts
  --timeout (else 30 days) and is removed when the job ends. A credential in
  $SMB_AUTH_TOKEN_FILE is passed on as it is; --no-job-credential passes the
  secret. Remote -H hosts get the secret (the file would be on this host only).

multi-host (-H / --hostfile):
  The workers are started by Open MPI's `mpirun -np N -H LIST -x SMB_SERVERS
  -x SMB_JOB_ID ... COMMAND` (--allow-run-as-root added when run as root).
  Open MPI sets OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
  OMPI_COMM_WORLD_LOCAL_RANK, ...; smbrun exports SMB_SERVERS, SMB_JOB_ID,
  WORLD_SIZE, SMB_SIZE, MASTER_ADDR (the first host), MASTER_PORT, every
  SMB_* variable of its environment and every -x, but no RANK. Without -np,
  N is the sum of the slots.

supervision:
  Each worker runs in its own process group (session). SIGINT, SIGTERM and
  SIGHUP are forwarded to the workers (and mpirun); a second one kills them.
  When a worker exits non-zero or is killed by a signal, smbrun names the
  rank, sends SIGTERM to the other workers' process groups, SIGKILL after
  --grace seconds, and exits. When all workers are done, what is left in
  their process groups gets SIGTERM (then SIGKILL). The servers it started
  are always stopped (SIGTERM, then SIGKILL), also on errors and Ctrl-C. If
  smbrun itself is SIGKILLed, the kernel kills its workers (SIGKILL) and
  servers (SIGTERM) through PR_SET_PDEATHSIG, but not the workers' children.
  --tag-output prefixes each line with "[RANK] " (stdout to stdout, stderr
  to stderr); by default the workers write to smbrun's stdout and stderr.

elastic (--min-np, --max-np, --host-discovery-script, --resume):
  Workers start on this host's free slots (the discovery script's lines
  HOST:SLOTS for this host; without it, --max-np or -np slots), each with
  SMB_ELASTIC=1 and SMB_WORKER_ID, and no RANK: hvd.init() takes its rank
  from the job's membership, which smbrun publishes in the fabric as
  rounds. A worker that fails is named (exit status or signal), dropped
  from a new round at once (its peers' collectives fail and the job
  re-forms from the last commit of hvd.elastic's state) and replaced on a
  free slot; a worker that starts joins at the job's next commit. Below
  --min-np smbrun waits --elastic-timeout, then fails naming the dead. A
  server smbrun started that dies is reported; the job goes on from the
  state's other copy. With --servers that outlive the job, --resume ID
  (or the same --job-id) continues from the last commit. docs/plugins.md,
  "Elastic training".

exit status:
  0 all workers succeeded; otherwise the first failing worker's exit code
  (128+N when killed by signal N; under mpirun, mpirun's status),
  124 after --timeout, 128+N when smbrun got signal N, 1 when the servers
  could not be started or one died while the job ran, 126/127 when COMMAND
  cannot be run / is not found, 2 on bad usage.

examples:
  smbrun -np 4 -- python3 train.py
  smbrun -np 4 --local-servers 2 --capacity 4G --tag-output -- ./worker
  smbrun -np 8 --servers 10.0.0.5:7000,10.0.0.6:7000 -- ./worker
  smbrun -H node1:4,node2:4 --listen-host 10.0.0.1 -- ./worker
  smbrun -np 3 --min-np 2 --max-np 4 --local-servers 2 -- python3 train_elastic.py
"""


class UsageError(Exception):
    pass


class SetupError(Exception):
    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


def log(msg):
    try:
        sys.stderr.write(f"{PROG}: {msg}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


# ---------------------------------------------------------------- arguments

def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def non_negative_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}")
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text!r}")
    return value


def size_text(text):
    if not re.fullmatch(r"\s*\d+(\.\d+)?\s*([KkMmGgTt]([Ii]?[Bb])?|[Bb])?\s*", text):
        raise argparse.ArgumentTypeError(f"not a size (e.g. 512M, 4G): {text!r}")
    return text.strip()


class Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n"
                              f"Try '{self.prog} --help' for more information.\n")


def build_parser():
    p = Parser(prog=PROG, allow_abbrev=False, description=DESCRIPTION, epilog=EPILOG,
               formatter_class=argparse.RawDescriptionHelpFormatter,
               usage="%(prog)s -np N [--local-servers K --capacity SIZE | --servers LIST]\n"
                     "              [-H HOST:SLOTS,... | --hostfile FILE] [--tag-output] [--smbd PATH]\n"
                     "              [--timeout S] [options] [--] COMMAND [ARGS...]")
    w = p.add_argument_group("workers")
    w.add_argument("-np", "-n", "--np", dest="np", type=positive_int, metavar="N",
                   help="number of worker processes (required, except with -H/--hostfile: the sum of the slots)")
    w.add_argument("--tag-output", action="store_true",
                   help="prefix every line a worker prints with [RANK] (under mpirun: Open MPI's --tag-output)")
    w.add_argument("-x", "--export", dest="exports", action="append", default=[], metavar="NAME[=VALUE]",
                   help="set NAME=VALUE for the workers (under mpirun: pass -x NAME[=VALUE]); repeatable")
    w.add_argument("--job-id", metavar="ID",
                   help="SMB_JOB_ID for the workers (default: a new one, hex of time and pid)")
    w.add_argument("--no-job-credential", dest="job_credential", action="store_false",
                   help="hand the workers $SMB_AUTH_TOKEN_FILE's shared secret itself instead of a credential "
                        "for this job's names only (see 'Per-job credentials' below)")
    w.add_argument("--master-port", type=non_negative_int, metavar="PORT",
                   help="MASTER_PORT (default: a free port of this host)")
    w.add_argument("--timeout", type=positive_float, metavar="S",
                   help="stop the job after S seconds in all (servers' start included); exit 124")
    w.add_argument("--grace", type=positive_float, default=DEFAULT_GRACE, metavar="S",
                   help=f"seconds between SIGTERM and SIGKILL when stopping (default {DEFAULT_GRACE:g})")

    s = p.add_argument_group("servers")
    s.add_argument("--local-servers", type=positive_int, metavar="K",
                   help="start K local smbd (default 1 unless --servers)")
    s.add_argument("--capacity", type=size_text, metavar="SIZE",
                   help=f"--capacity of each local smbd (default {DEFAULT_CAPACITY})")
    s.add_argument("--servers", metavar="LIST",
                   help="use running servers host:port,... instead of starting any")
    s.add_argument("--listen-host", metavar="IP",
                   help="address the local servers listen on (default 127.0.0.1; with remote -H hosts: "
                        "this host's address on the route to the first of them)")
    s.add_argument("--smbd", metavar="PATH", help="the smbd to run (default: $SMB_SMBD, the build tree, PATH)")
    s.add_argument("--smbd-arg", dest="smbd_args", action="append", default=[], metavar="ARG",
                   help="extra argument for every local smbd (use the ARG=VALUE form for "
                        "options: --smbd-arg=--log-level=warn); repeatable")
    s.add_argument("--server-timeout", type=positive_float, default=DEFAULT_SERVER_TIMEOUT, metavar="S",
                   help=f"seconds each smbd has to print its ready line (default {DEFAULT_SERVER_TIMEOUT:g})")
    s.add_argument("--server-logs", metavar="DIR",
                   help="keep each smbd's stderr in DIR/smbd-K.log (default: a temporary directory, removed)")

    m = p.add_argument_group("multi-host (Open MPI)")
    m.add_argument("-H", "--hosts", metavar="HOST:SLOTS,...",
                   help="run the workers through mpirun on these hosts")
    m.add_argument("--hostfile", metavar="FILE", help="run the workers through mpirun with this hostfile")
    m.add_argument("--mpirun", metavar="PATH", help="the mpirun to use (default: mpirun on PATH)")
    m.add_argument("--mpi-arg", dest="mpi_args", action="append", default=[], metavar="ARG",
                   help="extra argument for mpirun (--mpi-arg=--oversubscribe); repeatable")

    e = p.add_argument_group("elastic (horovodrun's flags; workers on this host)")
    e.add_argument("--min-np", type=positive_int, metavar="N",
                   help="elastic: the fewest workers the job runs with (below it, smbrun waits "
                        "--elastic-timeout for slots, then fails)")
    e.add_argument("--max-np", type=positive_int, metavar="N", help="elastic: the most workers")
    e.add_argument("--host-discovery-script", metavar="PATH",
                   help="elastic: prints the available HOST:SLOTS lines; run again every second")
    e.add_argument("--slots-per-host", type=positive_int, metavar="N",
                   help="elastic: slots of a discovered host printed without :SLOTS (default 1)")
    e.add_argument("--elastic-timeout", type=positive_float, default=600.0, metavar="S",
                   help="elastic: seconds to wait for --min-np workers (default 600)")
    e.add_argument("--reset-limit", type=non_negative_int, metavar="N",
                   help="elastic: fail after the job re-formed N times (default: no limit)")
    e.add_argument("--blacklist-cooldown-range", type=positive_float, nargs=2, metavar=("LOW", "HIGH"),
                   help="elastic: a host whose worker failed gets no new worker for LOW..HIGH seconds "
                        "(doubling with each failure)")
    e.add_argument("--resume", metavar="JOB_ID",
                   help="elastic: continue job JOB_ID from its last commit in the fabric (--servers: the "
                        "servers that hold it); the same as --job-id JOB_ID with elastic flags")

    p.add_argument("-v", "--verbose", action="store_true",
                   help="report servers, worker pids and the steps of shutting down on stderr")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND [ARGS...]",
                   help="the worker command (put it after --)")
    return p


def parse_args(argv):
    parser = build_parser()
    if "--" in argv:
        cut = argv.index("--")
        args = parser.parse_args(argv[:cut])
        if args.command:
            parser.error(f"unexpected arguments before '--': {' '.join(args.command)}")
        args.command = argv[cut + 1:]
    else:
        args = parser.parse_args(argv)
    if not args.command:
        parser.error("no COMMAND given (smbrun [options] -- COMMAND [ARGS...])")
    if args.servers is not None and (args.local_servers is not None or args.capacity is not None):
        parser.error("--servers uses running servers: it excludes --local-servers and --capacity")
    if args.servers is not None and args.smbd_args:
        parser.error("--smbd-arg applies to local servers only, not --servers")
    if args.hosts and args.hostfile:
        parser.error("give -H or --hostfile, not both")
    args.hostlist = []
    try:
        if args.hosts:
            args.hostlist = parse_host_list(args.hosts)
        elif args.hostfile:
            args.hostlist = parse_hostfile(args.hostfile)
    except UsageError as e:
        parser.error(str(e))
    args.elastic = any(v is not None for v in (args.min_np, args.max_np, args.host_discovery_script, args.resume))
    if args.elastic:
        if args.hostlist:
            parser.error("elastic mode starts its workers on this host: -H/--hostfile (mpirun) do not combine "
                         "with --min-np/--max-np/--host-discovery-script/--resume")
        if args.resume:
            if args.job_id and args.job_id != args.resume:
                parser.error(f"--resume {args.resume} and --job-id {args.job_id} name different jobs")
            args.job_id = args.resume
        if args.np is None:
            args.np = args.min_np or args.max_np
        if args.np is None:
            parser.error("elastic mode needs -np N (or --min-np/--max-np)")
        if args.min_np is None:
            args.min_np = args.np
        if args.max_np is not None and args.max_np < args.min_np:
            parser.error(f"--max-np {args.max_np} is less than --min-np {args.min_np}")
        if args.np < args.min_np or (args.max_np is not None and args.np > args.max_np):
            parser.error(f"-np {args.np} is outside --min-np {args.min_np} .. --max-np {args.max_np}")
        if args.blacklist_cooldown_range and args.blacklist_cooldown_range[0] > args.blacklist_cooldown_range[1]:
            parser.error("--blacklist-cooldown-range: LOW is more than HIGH")
    if args.np is None:
        if not args.hostlist:
            parser.error("-np N is required")
        args.np = sum(slots for _, slots in args.hostlist)
    if args.servers is not None:
        args.server_list = [s.strip() for s in args.servers.split(",") if s.strip()]
        if not args.server_list:
            parser.error("--servers: no host:port given")
        for s in args.server_list:
            if not re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[^:\s]+):\d+", s):
                parser.error(f"--servers: not host:port: {s!r}")
    else:
        args.server_list = None
        if args.local_servers is None:
            args.local_servers = 1
        if args.capacity is None:
            args.capacity = DEFAULT_CAPACITY
    for e in args.exports:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(=.*)?", e, re.S):
            parser.error(f"-x: not NAME or NAME=VALUE: {e!r}")
    return args


def parse_host_list(text):
    hosts = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, slots = item.rpartition(":")
        if not sep:
            host, slots = item, "1"
        if not host or not slots.isdigit() or int(slots) < 1:
            raise UsageError(f"-H: not HOST or HOST:SLOTS: {item!r}")
        hosts.append((host, int(slots)))
    if not hosts:
        raise UsageError("-H: no host given")
    return hosts


def parse_hostfile(path):
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        raise UsageError(f"--hostfile {path}: {e.strerror}")
    hosts = []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        host, slots = fields[0], 1
        if ":" in host and host.rpartition(":")[2].isdigit():
            host, _, s = host.rpartition(":")
            slots = int(s)
        for field in fields[1:]:
            if field.startswith("slots="):
                try:
                    slots = int(field[len("slots="):])
                except ValueError:
                    raise UsageError(f"--hostfile {path}: bad slots in {line!r}")
        hosts.append((host, max(slots, 1)))
    if not hosts:
        raise UsageError(f"--hostfile {path}: no host in it")
    return hosts


# ---------------------------------------------------------------- groups

def torch_group_size(env, size):
    """SMB_TORCH_GROUP_SIZE as smb.torch reads it (smb/collective/basics.py,
    _topology): taken only when a positive integer that divides the job's
    size, else ignored. Returns (N or None, the text when set but ignored)."""
    text = env.get("SMB_TORCH_GROUP_SIZE", "")
    if text.isdigit() and int(text) > 0 and size % int(text) == 0:
        return int(text), None
    return None, (text or None)


def describe_groups(size, env, hostlist=(), elastic=False):
    """The one line smbrun prints at start: how smb.torch will group the
    workers (its hybrid modes average inside a group; on one host all ranks
    form one group by default, where sync and downpour train as Horovod)."""
    workers = f"{size} worker{'s' if size != 1 else ''}"
    if elastic:
        return f"{workers}, elastic: each round's workers form 1 group (SMB_TORCH_GROUP_SIZE does not apply)"
    group, ignored = torch_group_size(env, size)
    if group is not None:
        count = size // group
        spans = [list(range(g * group, (g + 1) * group)) for g in range(count)]
        shown = spans if count <= 8 else spans[:4] + [None] + spans[-1:]
        text = " ".join("..." if s is None else
                        "[" + (",".join(map(str, s)) if len(s) <= 4 else f"{s[0]}..{s[-1]}") + "]"
                        for s in shown)
        return (f"{workers} in {count} group{'s' if count != 1 else ''} of {group} "
                f"(SMB_TORCH_GROUP_SIZE={group}): {text}")
    why = (f"SMB_TORCH_GROUP_SIZE={ignored} ignored: not a positive divisor of {size}" if ignored
           else "set SMB_TORCH_GROUP_SIZE=N for groups of N")
    if hostlist:
        hosts = " ".join(f"{h}:{s}" for h, s in hostlist)
        return f"{workers} in groups by host, as mpirun places the ranks ({hosts}; {why})"
    return f"{workers} in 1 group (all local ranks; {why})"


# ---------------------------------------------------------------- helpers

_libc = None


def _load_libc():
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.prctl  # noqa: B018 -- probe
        except (OSError, AttributeError):
            _libc = False
    return _libc


PR_SET_PDEATHSIG = 1


def child_setup(death_signal):
    """preexec_fn: die with `death_signal` when smbrun dies (Linux)."""
    libc = _load_libc()
    parent = os.getpid()

    def setup():
        if libc:
            libc.prctl(PR_SET_PDEATHSIG, int(death_signal), 0, 0, 0)
            if os.getppid() != parent:   # smbrun died before prctl took effect
                os.kill(os.getpid(), death_signal)
    return setup


def describe_status(code):
    if code is None:
        return "is still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by signal {-code} ({name})"
    return f"exited with code {code}"


def exit_code_of(code):
    return 128 - code if code < 0 else code


def free_port(host="127.0.0.1"):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def new_job_id():
    return f"{time.time_ns() // 1000:x}{os.getpid():x}"


def script_dir():
    """Where the command that started us lives: the smbrun entry point
    (BUILD/tools/smbrun/smbrun, PREFIX/bin/smbrun), or this module under
    `python3 -m smb.run` (BUILD/python/smb/run.py: smbd is as far up)."""
    return os.path.dirname(os.path.realpath(sys.argv[0] or __file__))


def is_executable(path):
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def find_smbd(explicit):
    if explicit:
        return explicit
    env = os.environ.get("SMB_SMBD")
    if env:
        return env
    here = script_dir()
    candidates = [
        os.path.join(here, "..", "..", "smb-server", "smbd"),   # BUILD/tools/smbrun/smbrun, BUILD/python/smb/run.py
        os.path.join(here, "smbd"),                             # installed: bin/smbrun, bin/smbd
    ]
    for c in candidates:
        if is_executable(c):
            return os.path.normpath(c)
    on_path = shutil.which("smbd")
    if on_path:
        return on_path
    raise SetupError("cannot find smbd: give --smbd PATH or set SMB_SMBD "
                     "(looked next to smbrun and on PATH)")


LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "::1"}


def is_local_host(host):
    h = host.strip("[]").lower()
    if h in LOCAL_NAMES or h.startswith("127."):
        return True
    names = {socket.gethostname().lower()}
    try:
        names.add(socket.getfqdn().lower())
    except OSError:
        pass
    return h in names or h == socket.gethostname().lower().split(".")[0]


def route_address(host):
    """This host's IPv4 address on the route to `host` (a UDP connect sends nothing)."""
    try:
        info = socket.getaddrinfo(host, 9, socket.AF_INET, socket.SOCK_DGRAM)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(info[0][4])
            addr = s.getsockname()[0]
            if not addr.startswith("127.") and addr != "0.0.0.0":
                return addr
    except OSError:
        pass
    return None


def first_non_loopback_address():
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            addr = info[4][0]
            if not addr.startswith("127."):
                return addr
    except OSError:
        pass
    try:   # /proc/net/fib_trie: "/32 host LOCAL" entries are this host's addresses
        with open("/proc/net/fib_trie", encoding="ascii") as f:
            lines = f.read().splitlines()
        for prev, line in zip(lines, lines[1:]):
            if "/32 host LOCAL" in line:
                addr = prev.split()[-1]
                if not addr.startswith("127."):
                    return addr
    except OSError:
        pass
    return None


# ---------------------------------------------------------------- processes

class Proc:
    """A child process that leads its own session and process group."""

    def __init__(self, label, popen):
        self.label = label
        self.popen = popen
        self.pid = popen.pid
        self.code = None
        self.group_gone = False

    def poll(self):
        if self.code is None:
            self.code = self.popen.poll()
            if self.code is not None:
                # Reaped: note now whether its group is empty, so that a later
                # group with a reused pid is never signalled.
                self.group_exists()
        return self.code

    @property
    def alive(self):
        return self.poll() is None

    def signal_group(self, sig):
        """Signal the process group: the leader and the children it started."""
        if self.group_gone:
            return False
        try:
            os.killpg(self.pid, sig)
            return True
        except (ProcessLookupError, PermissionError):
            self.group_gone = True
            return False

    def signal(self, sig):
        """Signal the process itself."""
        if self.alive:
            try:
                self.popen.send_signal(sig)
            except ProcessLookupError:
                pass

    def group_exists(self):
        return self.signal_group(0)


class Launcher:
    def __init__(self, args):
        self.args = args
        self.servers = []            # Proc
        self.server_addrs = []
        self.workers = []            # Proc (rank order; under mpirun: one, mpirun)
        self.mpi = bool(args.hostlist)
        self.start = time.monotonic()
        self.deadline = self.start + args.timeout if args.timeout else None
        self.signal_count = 0
        self.first_signal = None
        self.pending_signals = []
        self.log_dir = None
        self.own_log_dir = False
        self.credential_dir = None   # the per-job credential's (make_job_credential)
        self.credential_env = {}
        self.selector = selectors.DefaultSelector()
        self.pipes = {}              # fd -> [file, rank, out-stream, partial bytes]

    # ---- signals

    def install_signal_handlers(self):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self.on_signal)
        # A worker dying must not take smbrun with it through a broken pipe.
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)

    def on_signal(self, signum, frame):
        self.signal_count += 1
        if self.first_signal is None:
            self.first_signal = signum
        self.pending_signals.append(signum)

    def interrupted(self):
        return self.first_signal is not None

    def timed_out(self):
        return self.deadline is not None and time.monotonic() >= self.deadline

    def verbose(self, msg):
        if self.args.verbose:
            log(msg)

    # ---- servers

    def smbd_command(self, smbd, listen_host):
        host = f"[{listen_host}]" if ":" in listen_host else listen_host
        return [smbd, "--listen", f"{host}:0", "--capacity", self.args.capacity] + self.args.smbd_args

    def choose_listen_host(self):
        if self.args.listen_host:
            return self.args.listen_host
        if not self.mpi:
            return "127.0.0.1"
        remote = [h for h, _ in self.args.hostlist if not is_local_host(h)]
        if not remote:
            return "127.0.0.1"
        addr = route_address(remote[0]) or first_non_loopback_address()
        if not addr:
            raise SetupError("the -H hosts are remote but this host has no non-loopback address: "
                             "give --listen-host IP")
        return addr

    def start_servers(self):
        smbd = find_smbd(self.args.smbd)
        listen_host = self.choose_listen_host()
        if self.args.server_logs:
            self.log_dir = self.args.server_logs
            os.makedirs(self.log_dir, exist_ok=True)
        else:
            self.log_dir = tempfile.mkdtemp(prefix="smbrun-")
            self.own_log_dir = True
        cmd = self.smbd_command(smbd, listen_host)
        pending = {}
        for i in range(self.args.local_servers):
            log_path = os.path.join(self.log_dir, f"smbd-{i}.log")
            with open(log_path, "wb") as err:
                try:
                    popen = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                             stderr=err, start_new_session=True,
                                             preexec_fn=child_setup(signal.SIGTERM))
                except OSError as e:
                    raise SetupError(f"cannot run smbd: {shlex.join(cmd)}: {e.strerror or e}")
            proc = Proc(f"server {i}", popen)
            proc.cmd = cmd
            proc.log_path = log_path
            self.servers.append(proc)
            os.set_blocking(popen.stdout.fileno(), False)
            pending[popen.stdout.fileno()] = (proc, bytearray())
        self.server_addrs = [None] * len(self.servers)

        limit = time.monotonic() + self.args.server_timeout
        sel = selectors.DefaultSelector()
        for fd in pending:
            sel.register(fd, selectors.EVENT_READ)
        try:
            while pending:
                if self.interrupted():
                    raise Interrupted()
                now = time.monotonic()
                if self.deadline is not None and now >= self.deadline:
                    raise JobTimeout()
                if now >= limit:
                    proc = next(iter(pending.values()))[0]
                    raise SetupError(self.server_failure(
                        proc, f"printed no ready line within {self.args.server_timeout:g} s"))
                for key, _ in sel.select(min(0.1, limit - now)):
                    proc, buf = pending[key.fd]
                    try:
                        data = os.read(key.fd, 65536)
                    except BlockingIOError:
                        continue
                    buf += data
                    # A whole line, or what the pipe held at its end.
                    m = READY_RE.search(buf) or (not data and READY_EOF_RE.search(buf))
                    if m:
                        self.server_ready(proc, m.group(1).decode(errors="replace"), listen_host)
                    elif data:
                        continue
                    sel.unregister(key.fd)
                    del pending[key.fd]
                    if not m:    # end of its stdout: smbd exited (or closed it)
                        try:
                            proc.popen.wait(timeout=2.0)
                        except subprocess.TimeoutExpired:
                            pass
                        what = (f"{describe_status(proc.poll())} before printing its ready line"
                                if proc.poll() is not None else "closed its stdout without a ready line")
                        raise SetupError(self.server_failure(proc, what))
        finally:
            sel.close()
        # Keep draining the servers' stdout so that they never block on it.
        for proc in self.servers:
            fd = proc.popen.stdout.fileno()
            self.selector.register(fd, selectors.EVENT_READ, ("server", proc))
        return self.server_addrs

    def server_ready(self, proc, addr, listen_host):
        host, _, port = addr.rpartition(":")
        if host in ("0.0.0.0", "[::]", "::"):
            addr = f"{listen_host}:{port}"
        index = self.servers.index(proc)
        self.server_addrs[index] = addr
        self.verbose(f"{proc.label}: smbd pid {proc.pid} ready on {addr}: {shlex.join(proc.cmd)} "
                     f"(stderr: {proc.log_path})")

    def server_failure(self, proc, what):
        stderr = self.read_log(proc)
        msg = f"smbd did not start: `{shlex.join(proc.cmd)}` {what}"
        if stderr:
            msg += f"; its stderr:\n{stderr}"
        else:
            msg += " (its stderr was empty)"
        return msg

    def read_log(self, proc, limit=4000):
        try:
            with open(proc.log_path, "rb") as f:
                data = f.read()
        except (OSError, AttributeError):
            return ""
        text = data.decode(errors="replace").rstrip()
        if len(text) > limit:
            text = "...\n" + text[-limit:]
        return text

    def stop_servers(self):
        live = [p for p in self.servers if p.alive]
        for p in live:
            self.verbose(f"stopping {p.label} (smbd pid {p.pid}): SIGTERM")
            p.signal(signal.SIGTERM)
        self.wait_for(live, self.args.grace)
        for p in live:
            if p.alive:
                log(f"{p.label} (smbd pid {p.pid}) ignored SIGTERM for {self.args.grace:g} s: SIGKILL")
                p.signal_group(signal.SIGKILL)
        self.wait_for(live, 5.0)
        for p in self.servers:
            p.signal_group(signal.SIGKILL)   # anything smbd left in its group
            if p.popen.stdout:
                try:
                    self.selector.unregister(p.popen.stdout.fileno())
                except (KeyError, ValueError):
                    pass
                p.popen.stdout.close()
        if self.own_log_dir and self.log_dir:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    # ---- workers

    def base_env(self, job_id, master_addr, master_port):
        env = dict(os.environ)
        env["SMB_SERVERS"] = ",".join(self.server_addrs)
        env["SMB_JOB_ID"] = job_id
        env["WORLD_SIZE"] = env["SMB_SIZE"] = str(self.args.np)
        env["MASTER_ADDR"] = master_addr
        env["MASTER_PORT"] = str(master_port)
        env.update(self.credential_env)
        for e in self.args.exports:
            name, sep, value = e.partition("=")
            if sep:
                env[name] = value
        return env

    def start_local_workers(self, job_id, master_port):
        n = self.args.np
        base = self.base_env(job_id, "127.0.0.1", master_port)
        for rank in range(n):
            env = dict(base)
            env.update({
                "RANK": str(rank), "SMB_RANK": str(rank),
                "LOCAL_RANK": str(rank), "SMB_LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": str(n), "SMB_LOCAL_SIZE": str(n),
                "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1",
                "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(n),
                "HOROVOD_RANK": str(rank), "HOROVOD_SIZE": str(n),
                "HOROVOD_LOCAL_RANK": str(rank), "HOROVOD_LOCAL_SIZE": str(n),
                "HOROVOD_CROSS_RANK": "0", "HOROVOD_CROSS_SIZE": "1",
            })
            proc = self.spawn_worker(f"rank {rank}", rank, env, keep_stdin=rank == 0)
            proc.rank = rank

    def spawn_worker(self, label, tag, env, keep_stdin=False):
        """Starts COMMAND as one worker (its own session; SIGKILLed if smbrun
        dies); its output is prefixed with [tag] under --tag-output."""
        kwargs = {}
        if not keep_stdin:
            kwargs["stdin"] = subprocess.DEVNULL
        if self.args.tag_output:
            kwargs["stdout"] = subprocess.PIPE
            kwargs["stderr"] = subprocess.PIPE
        try:
            popen = subprocess.Popen(self.args.command, env=env, start_new_session=True,
                                     preexec_fn=child_setup(signal.SIGKILL), **kwargs)
        except OSError as e:
            raise SetupError(f"cannot run the command {shlex.join(self.args.command)}: "
                             f"{e.strerror or e}",
                             127 if isinstance(e, FileNotFoundError) else 126)
        proc = Proc(label, popen)
        self.workers.append(proc)
        self.verbose(f"{label}: pid {popen.pid}: {shlex.join(self.args.command)}")
        if self.args.tag_output:
            self.watch_output(popen.stdout, tag, sys.stdout)
            self.watch_output(popen.stderr, tag, sys.stderr)
        return proc

    def start_mpirun(self, job_id, master_port):
        args = self.args
        mpirun = args.mpirun or shutil.which("mpirun")
        if not mpirun:
            raise SetupError("-H/--hostfile run the workers through Open MPI's mpirun, "
                             "which is not on PATH (install openmpi-bin, or give --mpirun PATH)")
        first = args.hostlist[0][0]
        all_local = all(is_local_host(h) for h, _ in args.hostlist)
        if is_local_host(first):
            master_addr = "127.0.0.1" if all_local else (self.listen_addr_for_master() or first)
        else:
            master_addr = first
        env = self.base_env(job_id, master_addr, master_port)
        for name in RANK_VARS:
            env.pop(name, None)
        cmd = [mpirun, "-np", str(args.np)]
        if args.hosts:
            cmd += ["-H", ",".join(f"{h}:{s}" for h, s in args.hostlist)]
        else:
            cmd += ["--hostfile", args.hostfile]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
            env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
            env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        if args.tag_output:
            cmd.append("--tag-output")
        exported = ["SMB_SERVERS", "SMB_JOB_ID", "WORLD_SIZE", "SMB_SIZE", "MASTER_ADDR", "MASTER_PORT"]
        exported += sorted(k for k in env if k.startswith("SMB_") and k not in exported
                           and k not in RANK_VARS)
        for name in exported:
            cmd += ["-x", name]
        for e in args.exports:
            if e.partition("=")[0] not in exported:
                cmd += ["-x", e]
        cmd += args.mpi_args
        cmd += args.command
        self.verbose(f"mpirun: {shlex.join(cmd)}")
        try:
            popen = subprocess.Popen(cmd, env=env, start_new_session=True,
                                     preexec_fn=child_setup(signal.SIGTERM))
        except OSError as e:
            raise SetupError(f"cannot run mpirun {mpirun}: {e.strerror or e}")
        proc = Proc("mpirun", popen)
        proc.rank = None
        self.workers.append(proc)

    def listen_addr_for_master(self):
        if self.args.listen_host:
            return self.args.listen_host
        remote = [h for h, _ in self.args.hostlist if not is_local_host(h)]
        return (route_address(remote[0]) if remote else None) or first_non_loopback_address()

    # ---- output tagging

    def watch_output(self, stream, rank, out):
        fd = stream.fileno()
        os.set_blocking(fd, False)
        self.pipes[fd] = [stream, rank, out, b""]
        self.selector.register(fd, selectors.EVENT_READ, ("worker", fd))

    def emit(self, rank, out, data):
        prefix = f"[{rank}] ".encode()
        try:
            out.buffer.write(b"".join(prefix + line for line in data.splitlines(keepends=True)))
            out.flush()
        except (OSError, ValueError):
            pass

    def pump(self, timeout):
        """Wait up to `timeout` seconds for output; handle what arrives."""
        if not self.selector.get_map():
            time.sleep(timeout)
            return
        for key, _ in self.selector.select(timeout):
            kind, what = key.data
            if kind == "server":
                try:
                    data = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self.selector.unregister(key.fd)
                continue
            entry = self.pipes.get(what)
            if entry is None:
                continue
            stream, rank, out, partial = entry
            try:
                data = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                if partial:
                    self.emit(rank, out, partial + b"\n")
                self.selector.unregister(key.fd)
                stream.close()
                del self.pipes[key.fd]
                continue
            data = partial + data
            cut = data.rfind(b"\n") + 1
            entry[3] = data[cut:]
            if cut:
                self.emit(rank, out, data[:cut])

    def drain_output(self, seconds):
        end = time.monotonic() + seconds
        while self.pipes and time.monotonic() < end:
            self.pump(0.05)
        for fd, (stream, rank, out, partial) in list(self.pipes.items()):
            if partial:
                self.emit(rank, out, partial + b"\n")
            try:
                self.selector.unregister(fd)
            except (KeyError, ValueError):
                pass
            stream.close()
        self.pipes.clear()

    # ---- supervision

    def wait_for(self, procs, seconds):
        end = time.monotonic() + seconds
        while any(p.alive for p in procs) and time.monotonic() < end:
            if self.pending_signals:
                self.forward_pending_signals()
            self.pump(0.02)

    def forward_pending_signals(self):
        while self.pending_signals:
            sig = self.pending_signals.pop(0)
            if self.signal_count > 1:
                log(f"got {signal.Signals(sig).name} again: killing the workers")
                for w in self.workers:
                    w.signal_group(signal.SIGKILL)
                continue
            log(f"got {signal.Signals(sig).name}: forwarding it to the workers")
            for w in self.workers:
                if self.mpi:
                    w.signal(sig)          # mpirun passes it on to the ranks
                else:
                    w.signal_group(sig)

    def stop_workers(self, first_signal=signal.SIGTERM):
        """SIGTERM (or first_signal) to every live worker's group, SIGKILL after the grace."""
        live = [w for w in self.workers if w.alive]
        if live:
            self.verbose(f"stopping {len(live)} worker(s): {signal.Signals(first_signal).name}")
        for w in live:
            if self.mpi:
                w.signal(first_signal)
            else:
                w.signal_group(first_signal)
        self.wait_for(live, self.args.grace)
        for w in live:
            if w.alive:
                log(f"{w.label} (pid {w.pid}) still running {self.args.grace:g} s after "
                    f"{signal.Signals(first_signal).name}: SIGKILL")
        self.kill_worker_groups()
        self.wait_for(self.workers, 5.0)
        for w in self.workers:
            if w.alive:
                log(f"{w.label} (pid {w.pid}) survived SIGKILL (stuck in the kernel?); leaving it")

    def kill_worker_groups(self):
        """SIGKILL whatever is left in the workers' process groups (their children)."""
        for w in self.workers:
            w.signal_group(signal.SIGKILL)

    def reap_stragglers(self):
        """After the workers exited: their children still in their groups get SIGTERM, then SIGKILL."""
        groups = [w for w in self.workers if w.group_exists()]
        if not groups:
            return
        self.verbose(f"{len(groups)} worker process group(s) still have processes: SIGTERM")
        for w in groups:
            w.signal_group(signal.SIGTERM)
        end = time.monotonic() + self.args.grace
        while time.monotonic() < end and any(w.group_exists() for w in groups):
            self.pump(0.05)
        for w in groups:
            w.signal_group(signal.SIGKILL)

    def supervise(self):
        """Waits for the workers; returns smbrun's exit status."""
        while True:
            status = self.stopped_by_signal_or_timeout()
            if status is not None:
                return status
            for w in self.workers:
                if w.code is None and w.poll() is not None and w.code != 0:
                    return self.worker_failed(w)
            if all(w.code is not None for w in self.workers):
                self.verbose("all workers exited with code 0")
                return 0
            if self.servers_failed():
                return EXIT_SETUP
            self.pump(0.05)

    def stopped_by_signal_or_timeout(self):
        """Forwards pending signals; after a signal or --timeout, stops the
        workers and returns smbrun's exit status (None: go on)."""
        if self.pending_signals:
            self.forward_pending_signals()
        if self.interrupted():
            # Give the workers the grace to act on the forwarded signal, then force.
            self.wait_for(self.workers, self.args.grace)
            if any(w.alive for w in self.workers):
                self.stop_workers()
            return 128 + self.first_signal
        if self.timed_out():
            live = [w.label for w in self.workers if w.alive]
            log(f"--timeout {self.args.timeout:g} s expired; stopping {', '.join(live)}")
            self.stop_workers()
            return EXIT_TIMEOUT
        return None

    def servers_failed(self):
        """True (the workers stopped) if a server smbrun started died."""
        for i, srv in enumerate(self.servers):
            if srv.code is None and srv.poll() is not None:
                log(f"{srv.label} (smbd pid {srv.pid} on {self.server_addrs[i]}) "
                    f"{describe_status(srv.code)} while the job ran; stopping the workers")
                text = self.read_log(srv, 2000)
                if text:
                    log(f"its stderr:\n{text}")
                self.stop_workers()
                return True
        return False

    def worker_failed(self, w):
        if self.mpi:
            log(f"mpirun {describe_status(w.code)} (Open MPI's messages above name the failed rank)")
        else:
            others = sum(1 for o in self.workers if o.alive)
            log(f"rank {w.rank} (pid {w.pid}) {describe_status(w.code)}"
                + (f"; stopping the other {others} worker(s)" if others else ""))
        self.stop_workers()
        return exit_code_of(w.code)

    def run(self):
        self.install_signal_handlers()
        status = EXIT_SETUP
        try:
            if self.args.server_list is not None:
                self.server_addrs = list(self.args.server_list)
            else:
                self.start_servers()
            self.verbose(f"SMB_SERVERS={','.join(self.server_addrs)}")
            if self.interrupted():
                raise Interrupted()
            job_id = self.args.job_id or new_job_id()
            self.make_job_credential(job_id)
            master_port = self.args.master_port or free_port()
            # Effective worker environment: -x NAME=VALUE overrides smbrun's own.
            log(describe_groups(self.args.np, self.base_env(job_id, "127.0.0.1", master_port),
                                self.args.hostlist, self.args.elastic))
            if self.args.elastic:
                from .run_elastic import ElasticDriver
                status = ElasticDriver(self, job_id, master_port).run()
            elif self.mpi:
                self.start_mpirun(job_id, master_port)
                status = self.supervise()
            else:
                self.start_local_workers(job_id, master_port)
                status = self.supervise()
        except Interrupted:
            log(f"got {signal.Signals(self.first_signal).name} while starting; stopping")
            status = 128 + self.first_signal
        except JobTimeout:
            log(f"--timeout {self.args.timeout:g} s expired while starting the servers")
            status = EXIT_TIMEOUT
        except SetupError as e:
            log(str(e))
            status = e.code
        except BaseException as e:   # a bug or KeyboardInterrupt: still clean up, then re-raise
            log(f"internal error: {e!r}; stopping everything")
            self.cleanup()
            raise
        self.cleanup()
        return status

    def make_job_credential(self, job_id):
        """Where $SMB_AUTH_TOKEN_FILE holds the servers' shared secret, the
        workers get a credential for this job's names only (hvd/smb-JOB/...,
        smb.collective's namespace): a job cannot open, read or overwrite
        another job's buffers on a shared fabric. SMB_NAME_PREFIX tells the
        script the prefix its own buffers must start with. It lasts --timeout
        (and a minute), else 30 days; it is removed when the job ends."""
        secret_file = os.environ.get("SMB_AUTH_TOKEN_FILE")
        if not secret_file or not self.args.job_credential:
            return
        try:
            with open(secret_file, "rb") as f:
                if f.read(1) == b"{":
                    return  # already a credential: the workers get it as it is
        except OSError as e:
            raise SetupError(f"SMB_AUTH_TOKEN_FILE {secret_file}: cannot read it: {e.strerror or e}")
        if self.mpi and not all(is_local_host(h) for h, _ in self.args.hostlist):
            log("the workers get the shared secret itself (SMB_AUTH_TOKEN_FILE): a per-job credential would be a "
                "file on this host only; make one with 'smbctl credential create' and give each host its copy")
            return
        import smb
        from .collective import fabric
        prefix = fabric.buffer_name("hvd", "smb-" + job_id) + "/"
        lifetime = self.args.timeout + 60 if self.args.timeout else 30 * 24 * 3600
        try:
            text = smb.make_credential(secret_file, prefix, lifetime)
        except smb.Error as e:
            raise SetupError(f"cannot make the job's credential: {e}")
        self.credential_dir = tempfile.mkdtemp(prefix="smbrun-credential-")
        path = os.path.join(self.credential_dir, "credential.json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        self.credential_env = {"SMB_AUTH_TOKEN_FILE": path, "SMB_NAME_PREFIX": prefix}
        self.verbose(f"workers get a credential for names starting {prefix!r} only ({path})")

    def cleanup(self):
        # SIGINT/SIGTERM/SIGHUP only set flags (a second one SIGKILLs the
        # workers), so a Ctrl-C now cannot cut short stopping the servers.
        try:
            if any(w.alive for w in self.workers):
                self.stop_workers()
            self.reap_stragglers()
            self.drain_output(1.0)
        finally:
            try:
                self.stop_servers()
            finally:
                self.selector.close()
                if self.credential_dir:
                    shutil.rmtree(self.credential_dir, ignore_errors=True)


class Interrupted(Exception):
    pass


class JobTimeout(Exception):
    pass


def main(argv):
    args = parse_args(argv)
    launcher = Launcher(args)
    return launcher.run()


def console_main():
    """The `smbrun` console script of a pip install (pyproject.toml)."""
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
