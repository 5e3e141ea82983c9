#!/usr/bin/python3
"""The fabric's TCP data path against TCP itself, between two testbed hosts
(the testbed issue's "TCP data path"). A benchmark, not a test.

Two hosts joined by an unshaped link (tools/testbed/testbed.sh --link none),
so the CPU, not a rate limit, bounds every stream; in the same run, --runs
times each (medians reported):
  iperf3             a plain TCP stream, 1 MiB writes (skipped if iperf3 is
                     missing: apt-get install iperf3);
  ucx_perftest       ucp_am_bw, 1 MiB active messages (UCX's own ceiling);
  smb-bench          write and read of a 64 MiB buffer on one smbd, 1 MiB ops,
                     1 and 8 in flight, for each --transport: ucx (UCX's
                     TCP lane, "am: tcp") and tcp (our own sockets transport).
Prints smb-bench's bandwidth over each reference.

Usage: tools/bench/testbed_tcp.py [--preset ci | --build DIR] [--runs 3] [--transport ucx,tcp] [--write-docs]
Needs root and iproute2 (the testbed). Results: build/PRESET/testbed-tcp/.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from bench_common import replace_section
from testbed_hosts import ROOT, host_command, path_is_tcp, start_smbd, tb

NAME = "smbtbtcp"
BEGIN, END = "<!-- testbed-tcp:begin -->", "<!-- testbed-tcp:end -->"
PORT_IPERF, PORT_PERFTEST = 5201, 13350


def on(host, *argv, timeout=300, env=None):
    r = subprocess.run(host_command(NAME, host, *argv), text=True, capture_output=True, timeout=timeout, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{argv[0]} on {host} failed: {(r.stdout + r.stderr)[-500:]}")
    return r.stdout


def served(host, argv, client):
    """Runs the server `argv` on h2 while `client()` runs; returns client()'s result."""
    server = subprocess.Popen(host_command(NAME, host, *argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        return client()
    finally:
        server.kill()
        server.wait()


def iperf3(server_addr):
    out = served("h2", ["iperf3", "-s", "-1", "-p", PORT_IPERF], lambda: on(
        "h1", "iperf3", "-c", server_addr, "-p", PORT_IPERF, "-t", "4", "-l", "1M", "-J"))
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 8


def am_bw(server_addr):
    out = served("h2", ["ucx_perftest", "-p", PORT_PERFTEST], lambda: on(
        "h1", "ucx_perftest", server_addr, "-p", PORT_PERFTEST, "-t", "ucp_am_bw", "-s", 1 << 20, "-n", 3000))
    final = [line for line in out.splitlines() if line.startswith("Final:")]
    return float(final[-1].split()[5]) * 2**20  # MB/s column (UCX's MB are MiB), average


def smb(build, address, transport, op, depth):
    out = on("h1", os.path.join(build, "tools", "smb-bench"), "--servers", address, "--op", op, "--size", "64M",
             "--block", "1M", "--iters", 20, "--depth", depth, "--name", "tcp", "--keep", "--json",
             env=dict(os.environ, SMB_TRANSPORT=transport))
    doc = json.loads(out)
    if not all(path_is_tcp(p) for p in doc["paths"]):
        raise RuntimeError(f"smb-bench did not go over TCP: {doc['paths']}")
    return doc["bandwidth_bytes_per_s"]


def median(values):
    values = sorted(v for v in values if v is not None)
    return values[len(values) // 2] if values else None


def measure(build, runs, transports, log_dir):
    tb(NAME, "up", "--hosts", "2", "--link", "none")
    try:
        server_addr = tb(NAME, "addr", "h2").stdout.strip()
        servers = {t: start_smbd(NAME, build, "h2", log_dir, 256 << 20, listen=f"{server_addr}:{7000 + i}",
                                 data_transport=t) for i, t in enumerate(transports)}
        try:
            have_iperf = shutil.which("iperf3") is not None
            rows = {"iperf3": [], "am_bw": [],
                    **{f"{t} {op}{d}": [] for t in transports for op in ("write", "read") for d in (1, 8)}}
            for run in range(runs):
                print(f"== run {run + 1}/{runs}", file=sys.stderr)
                rows["iperf3"].append(iperf3(server_addr) if have_iperf else None)
                rows["am_bw"].append(am_bw(server_addr))
                for t, (_, address) in servers.items():
                    for op in ("write", "read"):
                        for depth in (1, 8):
                            rows[f"{t} {op}{depth}"].append(smb(build, address, t, op, depth))
            return rows
        finally:
            for proc, _ in servers.values():
                proc.kill()
                proc.wait()
    finally:
        subprocess.run([os.path.join(ROOT, "tools", "testbed", "testbed.sh"), "--name", NAME, "down"],
                       capture_output=True)


def markdown(rows, runs, transports):
    gbit = lambda b: f"{b * 8 / 1e9:.1f}" if b else "n/a"
    iperf, am = median(rows["iperf3"]), median(rows["am_bw"])
    out = [BEGIN, "",
           f"Measured by `tools/bench/testbed_tcp.py` on this 2-core machine: two testbed hosts on an unshaped "
           f"link (veth through a bridge; CPU-bound, not rate-limited), medians of {runs} runs. Gbit/s; "
           "smb-bench moves 1 MiB ops of a 64 MiB buffer on one smbd, over UCX's TCP lane (ucx) and over "
           "our own sockets transport (tcp).", "",
           "| what | Gbit/s | / iperf3 | / ucp_am_bw |", "|---|---|---|---|",
           f"| iperf3, one TCP stream, 1 MiB writes | {gbit(iperf)} | 1.00 | |",
           f"| ucx_perftest ucp_am_bw, 1 MiB | {gbit(am)} | {am / iperf:.2f} | 1.00 |" if iperf else
           f"| ucx_perftest ucp_am_bw, 1 MiB | {gbit(am)} | | 1.00 |"]
    for t in transports:
        for op in ("write", "read"):
            for depth in (1, 8):
                v = median(rows[f"{t} {op}{depth}"])
                vs_iperf = f"{v / iperf:.2f}" if iperf else ""
                out.append(f"| smb-bench {op}, {depth} in flight, {t} | {gbit(v)} | {vs_iperf} | {v / am:.2f} |")
    out += ["", END]
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="ci")
    p.add_argument("--build")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--transport", default="ucx,tcp", help="comma-separated: ucx (its TCP lane), tcp (ours)")
    p.add_argument("--write-docs", action="store_true")
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("testbed_tcp: needs root (network namespaces)")
    build = os.path.abspath(args.build) if args.build else os.path.join(ROOT, "build", args.preset)
    log_dir = os.path.join(build, "testbed-tcp")
    os.makedirs(log_dir, exist_ok=True)
    transports = args.transport.split(",")
    rows = measure(build, args.runs, transports, log_dir)
    with open(os.path.join(log_dir, "results.json"), "w") as f:
        json.dump(rows, f, indent=1)
    text = markdown(rows, args.runs, transports)
    print(text)
    if args.write_docs:
        replace_section(os.path.join(ROOT, "docs", "benchmarks.md"), BEGIN, END, text)


if __name__ == "__main__":
    main()
