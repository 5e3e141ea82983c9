#!/usr/bin/python3
"""The parameter exchange across testbed hosts against MPI and gloo (the
testbed issue's P4). A benchmark, not a test.

For each S in --servers (default 2 4): --workers worker hosts (default 4)
and S memory-server hosts, every link shaped to --link (default 1gbit) both
ways (tools/testbed/testbed.sh); one smbd per server host. Then, on the
worker hosts, one process each:
  smb-exchange-bench under mpirun (tools/testbed/mpi-agent.sh, Open MPI's TCP
      BTL on the links): the update engine's exchange (tau 1, one group per
      worker) in `sync` and `seasgd` mode, and MPI_Allreduce in the same
      processes;
  tools/bench/gloo_allreduce.py: torch.distributed's gloo allreduce.
Each moves --floats f32 per worker (default 25M: 100 MB). Prints the median
time per exchange (the slowest rank's), each one's speed against gloo's and
MPI's in the same run, and what the servers used (CPU seconds, RSS). The
SMB rows run over --transport (tcp: our own sockets transport, the default;
ucx: UCX's TCP lane).

With --per-host K (K > 1): K workers per worker host, each host with an
smbd of its own on its loopback for its group: rows for the flat
synchronous exchange and for the hybrid scheme's step (the group's average
through that smbd, then the root's exchange) in sync and seasgd mode,
against gloo and MPI over all the workers (item 2's group server; its own
section of docs/benchmarks.md). The group's smbd serves --group-transport
(default ucx: shared memory on the host, while the fabric stays on
--transport); a second one on --transport gives the grouped synchronous
row over the fabric's transport too, for comparison.

Usage: tools/bench/testbed_exchange.py [--preset ci | --build DIR] [--servers 2 4] [--workers 4]
           [--per-host 1 [--group-transport ucx]] [--link 1gbit] [--floats 25000000] [--iters 3] [--transport tcp] [--write-docs]
Needs root, iproute2 (the testbed) and Open MPI; gloo needs python3-torch.
Results: build/PRESET/testbed-exchange/.
"""

import argparse
import json
import os
import subprocess
import sys

from bench_common import replace_section
from testbed_hosts import ROOT, TESTBED, host_command, proc_usage, start_smbd, tb

NAME = "smbtbx"
BEGIN, END = "<!-- testbed-exchange:begin -->", "<!-- testbed-exchange:end -->"
GROUPS_BEGIN, GROUPS_END = "<!-- testbed-exchange-groups:begin -->", "<!-- testbed-exchange-groups:end -->"
# On every worker host's own loopback: its group's smbd, one per transport.
GROUP_SERVERS = {"ucx": "127.0.0.1:7100", "tcp": "127.0.0.1:7101"}
AGENT = os.path.join(ROOT, "tools", "testbed", "mpi-agent.sh")
GLOO = os.path.join(ROOT, "tools", "bench", "gloo_allreduce.py")


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no result in: {text[-800:]}")


def exchange(build, workers, servers, mode, floats, iters, log_dir, per_host=1, group_transport=None):
    """One smb-exchange-bench run; with `group_transport`, each host's
    workers form a group averaging through the host's smbd on it."""
    hosts = ",".join(f"h{i}:{per_host}" for i in range(1, workers // per_host + 1))
    group = (["--group-size", per_host, "--group-servers", GROUP_SERVERS[group_transport],
              "--group-transport", group_transport] if group_transport else [])
    grouped = f"-g{group_transport}" if group_transport else ""
    cmd = host_command(NAME, "h1", "mpirun", "--allow-run-as-root", "--host", hosts, "-np", workers,
                       "--mca", "plm_rsh_agent", AGENT, "--mca", "routed", "direct",
                       "--mca", "oob_tcp_if_include", "eth0", "--mca", "btl_tcp_if_include", "eth0",
                       "--mca", "btl", "tcp,self", "-x", "SMB_TRANSPORT",
                       os.path.join(build, "tools", "smb-exchange-bench"), "--servers", ",".join(servers),
                       "--mode", mode, "--floats", floats, "--iters", iters,
                       "--name", f"x-{mode}{grouped}", *group)
    env = dict(os.environ, SMB_TESTBED_NAME=NAME)
    r = subprocess.run(cmd, text=True, capture_output=True, timeout=1800, env=env)
    tag = f"{mode}{grouped}-{len(servers)}"
    with open(os.path.join(log_dir, f"exchange-{tag}.log"), "w") as f:
        f.write(r.stdout + r.stderr)
    if r.returncode != 0:
        raise RuntimeError(f"smb-exchange-bench {mode} failed: {(r.stdout + r.stderr)[-800:]}")
    return last_json(r.stdout)


def gloo(workers, floats, iters, log_dir, per_host=1):
    master = tb(NAME, "addr", "h1").stdout.strip() + ":29500"
    env = dict(os.environ, GLOO_SOCKET_IFNAME="eth0")
    procs = [subprocess.Popen(host_command(NAME, f"h{i // per_host + 1}", "/usr/bin/python3", GLOO, "--rank", i, "--world",
                                           workers, "--master", master, "--floats", floats, "--iters", iters),
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
             for i in range(workers)]
    outs = [p.communicate(timeout=1800)[0] for p in procs]
    with open(os.path.join(log_dir, "gloo.log"), "w") as f:
        f.write("\n".join(outs))
    if any(p.returncode != 0 for p in procs):
        raise RuntimeError(f"gloo allreduce failed: {outs[0][-800:]}")
    return last_json(outs[0])


def cpu_busy():
    """Jiffies the whole machine spent busy and in all, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


def busy_fraction(before, after):
    return (after[0] - before[0]) / max(1, after[1] - before[1])


def measure(build, workers, n_servers, link, floats, iters, log_dir, per_host=1, group_transport="ucx"):
    worker_hosts = workers // per_host
    tb(NAME, "up", "--hosts", str(worker_hosts + n_servers), "--link", link)
    procs = []
    try:
        servers = []
        bytes_ = floats * 4
        # sync: two sums, the global weights, counters; seasgd: the global
        # weights and one delta area per worker; over the servers, plus room.
        capacity = (3 + 1 + workers) * bytes_ // n_servers + (128 << 20)
        for i in range(worker_hosts + 1, worker_hosts + n_servers + 1):
            proc, address = start_smbd(NAME, build, f"h{i}", log_dir, capacity)
            procs.append(proc)
            servers.append(address)
        fabric_servers = list(procs)
        runs = [("sync", "sync", None), ("seasgd", "seasgd", None)]
        if per_host > 1:  # each host's group averages on its own smbd; the flat run for comparison
            fabric_transport = os.environ["SMB_TRANSPORT"]
            runs = [("sync", "sync", None), ("sync-grouped", "sync", group_transport),
                    ("seasgd-grouped", "seasgd", group_transport)]
            if group_transport != fabric_transport:
                runs.insert(1, ("sync-grouped-fabric", "sync", fabric_transport))
            for transport in {t for _, _, t in runs if t}:
                for i in range(1, worker_hosts + 1):
                    # the runs leave a group area each (2 sums and a slot of the floats)
                    procs.append(start_smbd(NAME, build, f"h{i}", log_dir, 6 * floats * 4 + (256 << 20),
                                            listen=GROUP_SERVERS[transport], data_transport=transport)[0])
        result = {}
        for key, mode, group in runs:
            before, busy = [proc_usage(p.pid) for p in fabric_servers], cpu_busy()
            result[key] = exchange(build, workers, servers, mode, floats, iters, log_dir, per_host, group)
            after = [proc_usage(p.pid) for p in fabric_servers]
            result[key]["machine_busy"] = busy_fraction(busy, cpu_busy())
            result[key]["server_cpu_s"] = sum(a[0] - b[0] for a, b in zip(after, before))
            result[key]["server_rss_max"] = max(a[1] for a in after)
        try:
            busy = cpu_busy()
            result["gloo"] = gloo(workers, floats, iters, log_dir, per_host)
            result["gloo"]["machine_busy"] = busy_fraction(busy, cpu_busy())
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"gloo: {e}", file=sys.stderr)
        return result
    finally:
        for p in procs:
            p.kill()
            p.wait()
        subprocess.run([TESTBED, "--name", NAME, "down"], capture_output=True)


def reference_rows(s, r, g, mpi, blanks, before=0):
    """The gloo and MPI_Allreduce rows of a table: `before` empty columns
    after the time, `blanks` empty columns (the servers' figures) before the
    last one, how busy the box was."""
    empty, gap = "| " * blanks, "| " * before
    rows = []
    if g:
        rows.append(f"| {s} | gloo allreduce (torch.distributed) | {g:.2f} {gap}| 1.00x | {mpi / g:.2f}x {empty}"
                    f"| {r['gloo']['machine_busy']:.0%} |")
    rows.append(f"| {s} | MPI_Allreduce (Open MPI, TCP) | {mpi:.2f} {gap}| {f'{g / mpi:.2f}x' if g else 'n/a'} | "
                f"1.00x {empty}| |")
    return rows


def markdown(results, workers, link, floats, iters, transport):
    mb = floats * 4 / 1e6
    out = [BEGIN, "",
           f"Measured by `tools/bench/testbed_exchange.py` on this 2-core machine: {workers} worker hosts and S "
           f"server hosts, every link {link} both ways; SMB over its `{transport}` transport, Open MPI and gloo "
           f"over TCP; {mb:.0f} MB of f32 per worker; the slowest rank's time per exchange, median of {iters} "
           "(after one warm-up). Speed is the reference's time over the row's (above 1: faster), gloo's and "
           "MPI_Allreduce's from the same run. Every process shares the same 2 cores, so these are not the "
           "links' figures alone; box busy is the share of the whole machine's CPU time that was busy during "
           "the row's run (SMB's includes the MPI_Allreduce runs in the same processes).", "",
           "| server hosts | exchange | s per exchange | vs gloo | vs MPI_Allreduce | server CPU s | server RSS (max) "
           "| box busy |",
           "|---|---|---|---|---|---|---|---|"]
    for s, r in results.items():
        mpi = min(r[m]["mpi_median_s"] for m in ("sync", "seasgd"))
        g = r["gloo"]["gloo_median_s"] if "gloo" in r else None
        for mode, label in (("sync", "SMB synchronous (pipelined)"), ("seasgd", "SMB SEASGD")):
            t = r[mode]["smb_median_s"]
            vs_gloo = f"{g / t:.2f}x" if g else "n/a"
            out.append(f"| {s} | {label} | {t:.2f} | {vs_gloo} | {mpi / t:.2f}x | {r[mode]['server_cpu_s']:.1f} | "
                       f"{r[mode]['server_rss_max'] / 2**20:.0f} MiB | {r[mode]['machine_busy']:.0%} |")
        out += reference_rows(s, r, g, mpi, blanks=2)
    out += ["", END]
    return "\n".join(out)


def groups_markdown(results, workers, per_host, link, floats, iters, transport, group_transport):
    mb = floats * 4 / 1e6
    out = [GROUPS_BEGIN, "",
           f"Measured by `tools/bench/testbed_exchange.py --per-host {per_host}`: {workers} workers on "
           f"{workers // per_host} worker hosts ({per_host} each) and S server hosts, every link {link}; SMB over "
           f"`{transport}`; {mb:.0f} MB of f32 per worker; the slowest rank's time per step's exchange, median of "
           f"{iters}. Grouped: each host's workers average a gradient through an smbd on the host's loopback "
           f"over `{group_transport}` unless the row names another transport, then the host's root exchanges the "
           "weights with the global ones (the hybrid scheme: one host's sum crosses its link); flat: every "
           f"worker exchanges on its own. gloo and MPI_Allreduce reduce over all {workers} ranks.", "",
           "The group average column is that phase alone (the step minus it is the hosts' exchange).", "",
           "| server hosts | exchange | s per step | group average s | vs gloo | vs MPI_Allreduce | fabric servers' CPU s "
           "| box busy |",
           "|---|---|---|---|---|---|---|---|"]
    labels = (("sync", "SMB synchronous, flat"),
              ("sync-grouped-fabric", f"SMB synchronous, group servers over `{transport}`"),
              ("sync-grouped", "SMB synchronous, group servers"), ("seasgd-grouped", "SMB SEASGD, group servers"))
    for s, r in results.items():
        labels_run = [(key, label) for key, label in labels if key in r]
        mpi = min(r[m]["mpi_median_s"] for m, _ in labels_run)
        g = r["gloo"]["gloo_median_s"] if "gloo" in r else None
        for key, label in labels_run:
            t = r[key]["smb_median_s"]
            group = r[key].get("group_median_s") or 0
            out.append(f"| {s} | {label} | {t:.2f} | {f'{group:.2f}' if group else ''} | "
                       f"{f'{g / t:.2f}x' if g else 'n/a'} | {mpi / t:.2f}x | "
                       f"{r[key]['server_cpu_s']:.1f} | {r[key]['machine_busy']:.0%} |")
        out += reference_rows(s, r, g, mpi, blanks=1, before=1)
    out += ["", GROUPS_END]
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="ci")
    p.add_argument("--build")
    p.add_argument("--servers", type=int, nargs="+", default=[2, 4])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--per-host", type=int, default=1,
                   help="workers per worker host; above 1, the hybrid scheme with a group server on each host")
    p.add_argument("--group-transport", default="ucx", choices=["tcp", "ucx"],
                   help="with --per-host: the transport to each host's group smbd (ucx: shared memory)")
    p.add_argument("--link", default="1gbit")
    p.add_argument("--floats", type=int, default=25_000_000)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--transport", default="tcp", choices=["tcp", "ucx"],
                   help="SMB's data transport: tcp (ours, default) or ucx (its TCP lane)")
    p.add_argument("--write-docs", action="store_true")
    args = p.parse_args()
    if args.per_host < 1 or args.workers % args.per_host:
        sys.exit(f"testbed_exchange: --workers {args.workers} is not a multiple of --per-host {args.per_host}")
    if os.geteuid() != 0:
        sys.exit("testbed_exchange: needs root (network namespaces)")
    build = os.path.abspath(args.build) if args.build else os.path.join(ROOT, "build", args.preset)
    if not os.path.exists(os.path.join(build, "tools", "smb-exchange-bench")):
        sys.exit(f"testbed_exchange: {build}/tools/smb-exchange-bench is missing (it needs Open MPI's libopenmpi-dev)")
    os.environ["SMB_TRANSPORT"] = args.transport  # smbd (testbed_hosts.start_smbd) and every rank (mpirun -x)
    log_dir = os.path.join(build, "testbed-exchange")
    os.makedirs(log_dir, exist_ok=True)
    results = {}
    for s in args.servers:
        print(f"== {s} server host(s)", file=sys.stderr)
        results[str(s)] = measure(build, args.workers, s, args.link, args.floats, args.iters, log_dir,
                                  args.per_host, args.group_transport)
        print(json.dumps(results[str(s)]), file=sys.stderr)
    with open(os.path.join(log_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    if args.per_host > 1:
        text = groups_markdown(results, args.workers, args.per_host, args.link, args.floats, args.iters,
                               args.transport, args.group_transport)
        begin, end = GROUPS_BEGIN, GROUPS_END
    else:
        text = markdown(results, args.workers, args.link, args.floats, args.iters, args.transport)
        begin, end = BEGIN, END
    print(text)
    if args.write_docs:
        replace_section(os.path.join(ROOT, "docs", "benchmarks.md"), begin, end, text)


if __name__ == "__main__":
    main()
