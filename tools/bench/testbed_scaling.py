#!/usr/bin/python3
"""Bandwidth against the number of memory servers, across testbed hosts (the
testbed issue's P3). A benchmark, not a test.

For each N (default 1 2 4 8): N server hosts behind --link (default 1gbit)
each and one client host with an unshaped link (tools/testbed/testbed.sh);
one smbd per server host; smb-bench on the client writes, then reads, one
buffer striped over all N (1 MiB stripes, N x --per-server bytes, --passes
passes, 1 MiB ops, --depth in flight: 2 per server by default), for each --transport (ucx: UCX's TCP lane; tcp: our own). In the
same run, iperf3 carries the same flows: one stream from the client to each
of the N hosts at once (write), and back (read, iperf3 -R). Prints aggregate
bandwidth, its ratio to iperf3's and to N x the bandwidth with one server,
and what the servers used: CPU seconds and RSS.

Usage: tools/bench/testbed_scaling.py [--preset ci | --build DIR] [--servers 1 2 4 8]
           [--link 1gbit] [--per-server 64M] [--passes 3] [--runs 2] [--transport tcp] [--write-docs]
Needs root and iproute2 (the testbed). Results: build/PRESET/testbed-scaling/.
"""

import argparse
import json
import os
import subprocess
import sys
import time

from bench_common import parse_size, replace_section
from testbed_hosts import ROOT, TESTBED, host_command, path_is_tcp, proc_usage
from testbed_hosts import start_smbd as start_smbd_on
from testbed_hosts import tb as tb_named

NAME = "smbtbscale"
BEGIN, END = "<!-- testbed-scaling:begin -->", "<!-- testbed-scaling:end -->"


def tb(*args, **kw):
    return tb_named(NAME, *args, **kw)


def start_smbd(build, host, log_dir, capacity, transport):
    return start_smbd_on(NAME, build, host, log_dir, capacity, data_transport=transport)


def bench(build, client, servers, transport, op, size, passes, depth):
    cmd = [TESTBED, "--name", NAME, "exec", client, os.path.join(build, "tools", "smb-bench"), "--servers",
           ",".join(servers), "--op", op, "--size", str(size), "--block", "1M", "--stripe-unit", "1M", "--iters",
           str(passes), "--depth", str(depth), "--name", "scaling", "--keep", "--json"]
    r = subprocess.run(cmd, text=True, capture_output=True, timeout=900, env=dict(os.environ, SMB_TRANSPORT=transport))
    if r.returncode != 0:
        raise RuntimeError(f"smb-bench {op} failed: {r.stderr[-500:]}")
    doc = json.loads(r.stdout)
    if not all(path_is_tcp(p) for p in doc["paths"]):
        raise RuntimeError(f"not every server was reached over the links: {doc['paths']}")
    return doc["bandwidth_bytes_per_s"]


def iperf3_flows(n, client, reverse, seconds=4):
    """iperf3 from the client to each of the n server hosts at once (reverse:
    from them to it); their summed bytes/s."""
    servers = [subprocess.Popen(host_command(NAME, f"h{i}", "iperf3", "-s", "-1", "-p", 5201), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL) for i in range(1, n + 1)]
    try:
        time.sleep(0.5)
        clients = [subprocess.Popen(host_command(NAME, client, "iperf3", "-c", tb("addr", f"h{i}").stdout.strip(),
                                                 "-p", 5201, "-t", seconds, "-l", "1M", "-J", *(["-R"] if reverse else [])),
                                    text=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                   for i in range(1, n + 1)]
        total = 0.0
        for c in clients:
            out, _ = c.communicate(timeout=seconds * 10 + 30)
            total += json.loads(out)["end"]["sum_received"]["bits_per_second"] / 8
        return total
    finally:
        for s in servers:
            s.kill()
            s.wait()


def measure(build, n, link, per_server, passes, transports, depth, log_dir):
    client = f"h{n + 1}"
    tb("up", "--hosts", str(n + 1), "--link", link, "--link-for", f"{client}=none")
    try:
        result = {"iperf3": {"write": iperf3_flows(n, client, False), "read": iperf3_flows(n, client, True)}}
        for transport in transports:
            procs = []
            try:
                servers = []
                for i in range(1, n + 1):
                    # Room for the buffer's share and little more: smbd faults its
                    # whole pool in at start, so RSS is mostly the capacity.
                    proc, address = start_smbd(build, f"h{i}", log_dir, per_server + (64 << 20), transport)
                    procs.append(proc)
                    servers.append(address)
                before = [proc_usage(p.pid) for p in procs]
                size = n * per_server
                in_flight = depth or 2 * n
                write = bench(build, client, servers, transport, "write", size, passes, in_flight)
                read = bench(build, client, servers, transport, "read", size, passes, in_flight)
                after = [proc_usage(p.pid) for p in procs]
                cpu = sum(a[0] - b[0] for a, b in zip(after, before))
                rss = max(a[1] for a in after)
                result[transport] = {"write": write, "read": read, "server_cpu_s": cpu, "server_rss_max": rss,
                                     "bytes_each_way": size * passes}
            finally:
                for p in procs:
                    p.kill()
                    p.wait()
        return result
    finally:
        subprocess.run([TESTBED, "--name", NAME, "down"], capture_output=True)


def markdown(results, link, per_server, passes, transports):
    mib = 1 << 20
    med = lambda values: sorted(values)[len(values) // 2]
    out = [BEGIN, "",
           f"Measured by `tools/bench/testbed_scaling.py` on this 2-core machine: N server hosts behind {link} "
           f"links, one client host with an unshaped link; one buffer striped over the N servers "
           f"(1 MiB stripes, {per_server // mib} MiB per server, {passes} passes, 1 MiB ops, 2 per server in "
           f"flight); medians of {len(results)} runs. "
           "'/ iperf3': against iperf3 carrying the same flows in the same run (a stream to, or from, each "
           "of the N hosts at once). 'of ideal': against N x the one-server bandwidth. Server RSS is mostly "
           "the pool (the share plus 64 MiB), which smbd faults in at start.", "",
           "| servers | transport | write MiB/s | / iperf3 | of ideal | read MiB/s | / iperf3 | of ideal | "
           "server CPU s (all) | server RSS (max) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for n in results[0]:
        ref = {op: med([r[n]["iperf3"][op] for r in results]) for op in ("write", "read")}
        out.append(f"| {n} | iperf3 | {ref['write'] / mib:.0f} | 1.00 | | {ref['read'] / mib:.0f} | 1.00 | | | |")
        for t in transports:
            bw = {op: med([r[n][t][op] for r in results]) for op in ("write", "read")}
            vs = {op: med([r[n][t][op] / r[n]["iperf3"][op] for r in results]) for op in ("write", "read")}
            base = {op: med([r["1"][t][op] for r in results]) if "1" in results[0] else None for op in bw}
            ideal = {op: f"{bw[op] / (int(n) * base[op]):.2f}" if base[op] else "" for op in bw}
            cpu = med([r[n][t]["server_cpu_s"] for r in results])
            rss = max(r[n][t]["server_rss_max"] for r in results)
            out.append(f"| {n} | {t} | {bw['write'] / mib:.0f} | {vs['write']:.2f} | {ideal['write']} | "
                       f"{bw['read'] / mib:.0f} | {vs['read']:.2f} | {ideal['read']} | {cpu:.1f} | {rss / mib:.0f} MiB |")
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
    p.add_argument("--transport", default="tcp", help="comma-separated: ucx (its TCP lane), tcp (ours)")
    p.add_argument("--depth", type=int, default=0,
                   help="1 MiB ops in flight (default 0: 2 per server, so that no link idles; with 1, a "
                        "link's tbf burst of 10 ms lets one op through at line rate and hides the limit)")
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
            results[-1][str(n)] = measure(build, n, args.link, args.per_server, args.passes,
                                          args.transport.split(","), args.depth, log_dir)
            print(json.dumps(results[-1][str(n)]), file=sys.stderr)
    with open(os.path.join(log_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    text = markdown(results, args.link, args.per_server, args.passes, args.transport.split(","))
    print(text)
    if args.write_docs:
        replace_section(os.path.join(ROOT, "docs", "benchmarks.md"), BEGIN, END, text)


if __name__ == "__main__":
    main()
