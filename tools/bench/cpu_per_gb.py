#!/usr/bin/python3
"""CPU seconds per GB moved over TCP: the fabric's data path against the
kernel's TCP carrying the same bytes, in one run. A benchmark, not a test
(issue "Across hosts, faster than gloo", item 1).

On loopback, one smbd (its defaults, or --smbd-arg) pinned to CPU 0 and
one client pinned to CPU 1, it moves --gib GiB of 1 MiB ops (--depth in
flight) through one buffer and reads each process's user+system CPU time
from /proc (smbd) and rusage (the client), for each --transport:
  ucx: UCX's TCP lane (UCX_TLS=tcp,self)   tcp: our own sockets transport
  write, read                   smb-bench
  accumulate (f32, x inline)    the same bytes sent as server-side accumulates
and, as references carrying the same bytes:
  iperf3                        one TCP stream, 1 MiB writes (sender + receiver)
  gloo allreduce (torch)        2 ranks, an f32 tensor of 256 MiB: CPU of both
                                ranks per GB each rank sends (2 (n-1)/n of it)
Prints client, server and total CPU s/GB and the total over iperf3's.

Usage: tools/bench/cpu_per_gb.py [--preset ci | --build DIR] [--gib 2] [--depth 16] [--runs 3] [--no-gloo]
                                 [--transport ucx,tcp] [--smbd-arg ARG]...
Results (JSON) go to build/PRESET/cpu-per-gb/.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from latency import CLIENT_CPU, SERVER_CPU, ROOT, env_for, free_port, wait_listen

MIB = 1 << 20
TICKS = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid):
    """User + system CPU seconds of a live process (/proc/PID/stat fields 14, 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_child(cmd, env=None):
    """Runs `cmd` to completion; its CPU seconds (from this process's children rusage)."""
    before = children_cpu()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {(done.stdout + done.stderr)[-800:]}")
    return children_cpu() - before, done.stdout


class Smbd:
    def __init__(self, build, capacity, transport, extra_args):
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["taskset", "-c", SERVER_CPU, os.path.join(build, "smb-server", "smbd"), "--listen",
             f"127.0.0.1:{self.port}", "--capacity", capacity, "--transport", transport, *extra_args],
            env=transport_env(transport), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_listen(self.port):
            raise RuntimeError("smbd did not start")
        self.address = f"127.0.0.1:{self.port}"

    def cpu(self):
        return proc_cpu(self.proc.pid)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def transport_env(transport):
    """The environment of smbd and smb-bench: UCX over its TCP lane, or our tcp transport."""
    env = env_for("tcp,self")
    if transport != "ucx":
        env["SMB_TRANSPORT"] = transport
    return env


def smb_op(build, server, transport, op, size, iters, depth, name):
    cmd = ["taskset", "-c", CLIENT_CPU, os.path.join(build, "tools", "smb-bench"), "--servers", server.address,
           "--name", name, "--op", op, "--size", str(size), "--iters", str(iters), "--json"]
    if op in ("write", "read"):
        cmd += ["--block", "1M", "--depth", str(depth)]
    else:
        cmd += ["--block", "1M", "--dtype", "f32"]
    server_before = server.cpu()
    client, out = run_child(cmd, transport_env(transport))
    return {"client": client, "server": server.cpu() - server_before, "bytes": size * iters, "report": json.loads(out)}


def iperf3(total):
    port = free_port()
    before = children_cpu()
    server = subprocess.Popen(["taskset", "-c", SERVER_CPU, "iperf3", "-s", "-1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        client, _ = run_child(["taskset", "-c", CLIENT_CPU, "iperf3", "-c", "127.0.0.1", "-p", str(port), "-n",
                               str(total), "-l", "1M"])
        server.wait(timeout=30)
        # The server is a child too: its CPU is in the children's rusage once it is reaped.
        return {"client": client, "server": children_cpu() - before - client, "bytes": total}
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


GLOO = r"""
import os, sys, time, resource, torch, torch.distributed as dist
rank, world, n = int(sys.argv[1]), 2, int(sys.argv[2])
dist.init_process_group("gloo", rank=rank, world_size=world)
t = torch.ones(64 * 1024 * 1024)  # 256 MiB of f32
dist.all_reduce(t)                # warm up
r0 = resource.getrusage(resource.RUSAGE_SELF)
for _ in range(n):
    dist.all_reduce(t)
r1 = resource.getrusage(resource.RUSAGE_SELF)
print((r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime))
"""


def gloo(iters):
    port = free_port()
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    ranks = [subprocess.Popen(["taskset", "-c", cpu, "/usr/bin/python3", "-c", GLOO, str(rank), str(iters)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank, cpu in ((0, SERVER_CPU), (1, CLIENT_CPU))]
    cpu = []
    for p in ranks:
        out, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"gloo rank failed: {err[-800:]}")
        cpu.append(float(out.strip().splitlines()[-1]))
    # Each rank sends 2 (n-1)/n = 1 x 256 MiB per allreduce of 2 ranks.
    return {"client": cpu[1], "server": cpu[0], "bytes": iters * 256 * MIB}


def per_gb(m):
    gb = m["bytes"] / 1e9
    return {"client": m["client"] / gb, "server": m["server"] / gb, "total": (m["client"] + m["server"]) / gb}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="ci")
    ap.add_argument("--build")
    ap.add_argument("--gib", type=int, default=2)
    ap.add_argument("--depth", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-gloo", action="store_true")
    ap.add_argument("--transport", default="ucx,tcp", help="comma-separated: ucx (its TCP lane), tcp (ours)")
    ap.add_argument("--smbd-arg", action="append", default=[],
                    help="one more smbd argument, e.g. --smbd-arg=--spin-us=0 (no spinning after work)")
    args = ap.parse_args()
    build = args.build or os.path.join(ROOT, "build", args.preset)
    out_dir = os.path.join(build, "cpu-per-gb")
    os.makedirs(out_dir, exist_ok=True)
    size, iters = 256 * MIB, args.gib * 4
    runs = []
    for _ in range(args.runs):
        run = {}
        for transport in args.transport.split(","):
            server = Smbd(build, "512M", transport, args.smbd_arg)
            try:
                for op in ("write", "read", "accumulate"):
                    run[f"{op} ({transport})"] = per_gb(
                        smb_op(build, server, transport, op, size, iters, args.depth, "cpu-per-gb"))
            finally:
                server.stop()
        run["iperf3"] = per_gb(iperf3(size * iters))
        if not args.no_gloo:
            run["gloo allreduce"] = per_gb(gloo(4))
        runs.append(run)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(runs, f, indent=1)
    ref = statistics.median(r["iperf3"]["total"] for r in runs)
    print(f"CPU seconds per GB over TCP on loopback, median of {args.runs} run(s); "
          f"smbd on CPU {SERVER_CPU}, client on CPU {CLIENT_CPU}")
    print("| what | client s/GB | server s/GB | total s/GB | total / iperf3 |")
    print("|---|---:|---:|---:|---:|")
    for what in runs[0]:
        med = {k: statistics.median(r[what][k] for r in runs) for k in ("client", "server", "total")}
        print(f"| {what} | {med['client']:.3f} | {med['server']:.3f} | {med['total']:.3f} | {med['total'] / ref:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
