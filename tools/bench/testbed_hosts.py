"""Helpers the testbed benchmarks share (tools/testbed/testbed.sh): run a
command in a testbed, start smbd on a host, read a process's CPU and RSS."""

import os
import re
import subprocess
import time

from bench_common import ROOT
TESTBED = os.path.join(ROOT, "tools", "testbed", "testbed.sh")


def tb(name, *args, **kw):
    """testbed.sh --name NAME ARGS..., checked; its output as text."""
    return subprocess.run([TESTBED, "--name", name, *args], check=True, text=True, capture_output=True, **kw)


def host_command(name, host, *argv):
    """The command line that runs argv on a testbed host (it execs down to argv)."""
    return [TESTBED, "--name", name, "exec", host, *map(str, argv)]


def proc_usage(pid):
    """(CPU seconds, RSS bytes) of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    with open(f"/proc/{pid}/status") as f:
        rss = int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) * 1024
    return cpu, rss


def transport():
    """The data transport the benchmarks run: SMB_TRANSPORT (libsmb reads it
    too), else UCX. The benchmarks' --transport sets it."""
    return os.environ.get("SMB_TRANSPORT") or "ucx"


def path_is_tcp(path):
    """Whether smb-bench's path line says the bytes crossed TCP: UCX's TCP
    lane ("am: tcp") or our tcp transport ("tcp sockets")."""
    return "am: tcp" in path or "tcp sockets" in path


def start_smbd(name, build, host, log_dir, capacity, timeout=120, listen=None, data_transport=None):
    """smbd on `host`, by default on its address, port 7000, serving
    `data_transport` (default: transport()): (its Popen, "ADDRESS:PORT")
    once it is ready."""
    listen = listen or tb(name, "addr", host).stdout.strip() + ":7000"
    log = open(os.path.join(log_dir, f"smbd-{host}-{listen.replace(':', '-')}.log"), "w+")
    proc = subprocess.Popen(host_command(name, host, os.path.join(build, "smb-server", "smbd"), "--listen",
                                         listen, "--capacity", str(capacity), "--transport",
                                         data_transport or transport()),
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + timeout
    while time.time() < deadline:
        log.seek(0)
        if "smbd ready" in log.read():
            return proc, listen
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError(f"smbd on {host} did not start (log {log.name})")

