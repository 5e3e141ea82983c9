#!/usr/bin/python3
"""Bandwidth against the number of memory servers, across testbed hosts (the
testbed issue's P3). A benchmark, not a test.

For each N (default 1 2 4 8): N server hosts behind --link (default 1gbit)
each and one client host with an unshaped link (tools/testbed/testbed.sh);
one smbd per server host; smb-bench on the client writes, then reads, one
buffer striped over all N (1 MiB stripes, N x --per-server bytes, --passes
passes). Prints aggregate bandwidth, its ratio to N x the bandwidth with one
server (the ideal), and what the servers used: CPU seconds and RSS.

Usage: tools/bench/testbed_scaling.py [--preset ci | --build DIR] [--servers 1 2 4 8]
           [--link 1gbit] [--per-server 64M] [--passes 3] [--runs 2] [--write-docs]
Needs root and iproute2 (the testbed). Results: build/PRESET/testbed-scaling/.
"""

import argparse
import json
import os
import re
import subprocess
import sys

from testbed_hosts import ROOT, TESTBED, proc_usage, replace_section
from testbed_hosts import start_smbd as start_smbd_on
from testbed_hosts import tb as tb_named

NAME = "smbtbscale"
BEGIN, END = "<!-- testbed-scaling:begin -->", "<!-- testbed-scaling:end -->"


def tb(*args, **kw):
    return tb_named(NAME, *args, **kw)


def start_smbd(build, host, log_dir, capacity):
    return start_smbd_on(NAME, build, host, log_dir, capacity)


def bench(build, client, servers, op, size, passes):
    cmd = [TESTBED, "--name", NAME, "exec", client, os.path.join(build, "tools", "smb-bench"), "--servers",
           ",".join(servers), "--op", op, "--size", str(size), "--block", "1M", "--stripe-unit", "1M", "--iters",
           str(passes), "--name", "scaling", "--keep", "--json"]
    r = subprocess.run(cmd, text=True, capture_output=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"smb-bench {op} failed: {r.stderr[-500:]}")
    doc = json.loads(r.stdout)
    if not all("am: tcp" in p for p in doc["paths"]):
        raise RuntimeError(f"not every server was reached over the links: {doc['paths']}")
    return doc["bandwidth_bytes_per_s"]


def measure(build, n, link, per_server, passes, log_dir):
    client = f"h{n + 1}"
    tb("up", "--hosts", str(n + 1), "--link", link, "--link-for", f"{client}=none")
    procs = []
    try:
        servers = []
        for i in range(1, n + 1):
            # Room for the buffer's share and little more: smbd faults its
            # whole pool in at start, so RSS is mostly the capacity.
            proc, address = start_smbd(build, f"h{i}", log_dir, per_server + (64 << 20))
            procs.append(proc)
            servers.append(address)
        before = [proc_usage(p.pid) for p in procs]
        size = n * per_server
        write = bench(build, client, servers, "write", size, passes)
        read = bench(build, client, servers, "read", size, passes)
        after = [proc_usage(p.pid) for p in procs]
        cpu = sum(a[0] - b[0] for a, b in zip(after, before))
        rss = max(a[1] for a in after)
        return {"write": write, "read": read, "server_cpu_s": cpu, "server_rss_max": rss, "bytes_each_way": size * passes}
    finally:
        for p in procs:
            p.kill()
            p.wait()
        subprocess.run([TESTBED, "--name", NAME, "down"], capture_output=True)


def parse_size(text):
    m = re.fullmatch(r"(\d+)([KMG]?)", text)
    if not m:
        raise argparse.ArgumentTypeError(f"a size such as 64M: {text}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def markdown(results, link, per_server, passes):
    mib = 1 << 20
    base = {op: max(r["1"][op] for r in results) if "1" in results[0] else None for op in ("write", "read")}
    out = [BEGIN, "",
           f"Measured by `tools/bench/testbed_scaling.py` on this 2-core machine: N server hosts behind {link} "
           f"links, one client host with an unshaped link, UCX over TCP; one buffer striped over the N servers "
           f"(1 MiB stripes, {per_server // mib} MiB per server, {passes} passes); best of {len(results)} runs. "
           "Ideal = N x the one-server bandwidth. Server RSS is mostly the pool (the share plus 64 MiB), "
           "which smbd faults in at start.", "",
           "| servers | write MiB/s | of ideal | read MiB/s | of ideal | server CPU s (all) | server RSS (max) |",
           "|---|---|---|---|---|---|---|"]
    for n in results[0]:
        best = {op: max(r[n][op] for r in results) for op in ("write", "read")}
        cpu = min(r[n]["server_cpu_s"] for r in results)
        rss = max(r[n]["server_rss_max"] for r in results)
        ratio = {op: (best[op] / (int(n) * base[op]) if base[op] else float("nan")) for op in best}
        out.append(f"| {n} | {best['write'] / mib:.0f} | {ratio['write']:.2f} | {best['read'] / mib:.0f} | "
                   f"{ratio['read']:.2f} | {cpu:.1f} | {rss / mib:.0f} MiB |")
    out += ["", END]
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="ci")
    p.add_argument("--build")
    p.add_argument("--servers", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--link", default="1gbit")
    p.add_argument("--per-server", type=parse_size, default=parse_size("64M"))
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--write-docs", action="store_true")
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("testbed_scaling: needs root (network namespaces)")
    build = os.path.abspath(args.build) if args.build else os.path.join(ROOT, "build", args.preset)
    log_dir = os.path.join(build, "testbed-scaling")
    os.makedirs(log_dir, exist_ok=True)
    results = []
    for run in range(args.runs):
        results.append({})
        for n in args.servers:
            print(f"== run {run + 1}: {n} server host(s)", file=sys.stderr)
            results[-1][str(n)] = measure(build, n, args.link, args.per_server, args.passes, log_dir)
            print(json.dumps(results[-1][str(n)]), file=sys.stderr)
    with open(os.path.join(log_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    text = markdown(results, args.link, args.per_server, args.passes)
    print(text)
    if args.write_docs:
        replace_section(os.path.join(ROOT, "docs", "benchmarks.md"), BEGIN, END, text)


if __name__ == "__main__":
    main()
