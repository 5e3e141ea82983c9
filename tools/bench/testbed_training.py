#!/usr/bin/python3
"""Time to accuracy across testbed hosts: the torch example
(plugins/torch/examples/train_digits.py) trained by SMB's hybrid modes
against PyTorch DDP over gloo, same workers (the testbed issue's P5). A
benchmark, not a test.

Hosts (tools/testbed/testbed.sh, every link --link, default 1gbit): h1 and
h2 run --per-host workers each (default 2: 4 workers), h3 and h4 one smbd
each (the fabric: the global weights). Each worker host also runs an smbd
on 127.0.0.1:7100 for its group (SMB_GROUP_SERVERS), so a node averages
over shared memory and only the roots' exchange crosses the links. Workers
start under Open MPI's mpirun through the testbed's launch agent.

Configurations, each run --repeat times: DDP over gloo; smb.torch's
Horovod averaging; the hybrid modes (sync and seasgd, --tau). Reported: the
median seconds until the test accuracy first reaches --target (rank 0's
clock from the first step), its ratio to DDP-gloo's (above 1: faster), the
final accuracy, and the fabric servers' CPU seconds and RSS.

Usage: tools/bench/testbed_training.py [--preset ci | --build DIR] [--epochs 12] [--target 0.97]
           [--repeat 3] [--tau 4] [--link 1gbit] [--write-docs] [--plot]
           [--sites 2 [--between 100mbit] [--rtt 50]]

--sites 2 is the two-site scenario: h1, h2 (workers) and h3 (server) in one
site, h4, h5 and h6 in the other, joined by a slow, distant line; each site
is a group that averages every step through its own server, and exchanges
with the global weights (striped over h3 and h6) every --tau steps.
Needs root, iproute2, Open MPI, python3-torch and python3-sklearn.
Results: build/PRESET/testbed-training/.
"""

import argparse
import json
import os
import subprocess
import sys

from bench_common import replace_section
from testbed_hosts import ROOT, host_command, proc_usage, start_smbd, tb

NAME = "smbtbtrain"
BEGIN, END = "<!-- testbed-training:begin -->", "<!-- testbed-training:end -->"
BEGIN_SITES, END_SITES = "<!-- testbed-two-sites:begin -->", "<!-- testbed-two-sites:end -->"
AGENT = os.path.join(ROOT, "tools", "testbed", "mpi-agent.sh")
EXAMPLE = os.path.join(ROOT, "plugins", "torch", "examples", "train_digits.py")
GROUP_SERVER = "127.0.0.1:7100"
PYTHON = "/usr/bin/python3"


def mpirun(hosts, per_host, env, argv):
    """The command that runs argv on `hosts` (per_host ranks each) under mpirun, from the first."""
    cmd = ["mpirun", "--allow-run-as-root", "--host", ",".join(f"{h}:{per_host}" for h in hosts),
           "-np", str(len(hosts) * per_host),
           "--mca", "plm_rsh_agent", AGENT, "--mca", "routed", "direct", "--mca", "oob_tcp_if_include", "eth0",
           "--mca", "btl_tcp_if_include", "eth0", "--mca", "btl", "tcp,self"]
    for name, value in env.items():
        cmd += ["-x", f"{name}={value}"]
    return host_command(NAME, hosts[0], *cmd, *argv)


def site_env(layout, argv):
    """argv run with each rank's own site's group server (SMB_GROUP_SERVERS):
    ranks are placed on the worker hosts in order, site after site."""
    per_site = layout["ranks_per_site"]
    choices = " ".join(f'[ "$r" -ge {i * per_site} ] && export SMB_GROUP_SERVERS={g};'
                       for i, g in enumerate(layout["group_servers"]))
    return ["sh", "-c", f'r=$OMPI_COMM_WORLD_RANK; {choices} exec "$@"', "sh", *argv]


def train(config, args, layout, fabric, run, log_dir):
    """One training run: rank 0's epochs as dicts."""
    label, mode, extra = config
    workers = layout["workers"]
    env = {"PYTHONPATH": os.path.join(layout["build"], "python"), "OMP_NUM_THREADS": "1"}
    argv = [PYTHON, EXAMPLE, "--epochs", args.epochs, "--json", *extra]
    if mode == "ddp-gloo":
        env.update(MASTER_ADDR=tb(NAME, "addr", workers[0]).stdout.strip(), MASTER_PORT=str(29600 + run),
                   GLOO_SOCKET_IFNAME="eth0")
        # torch.distributed's env:// wants RANK and WORLD_SIZE; Open MPI names them its own way.
        argv = ["sh", "-c", 'RANK=$OMPI_COMM_WORLD_RANK WORLD_SIZE=$OMPI_COMM_WORLD_SIZE exec "$@"', "sh",
                *argv, "--baseline", "ddp-gloo"]
    else:
        env.update(SMB_SERVERS=",".join(fabric), SMB_JOB_ID=f"{NAME}-{label.replace(' ', '-')}-{run}")
        if layout["group_servers"] == [GROUP_SERVER]:  # over shared memory, whatever the fabric's transport
            env.update(SMB_GROUP_SERVERS=GROUP_SERVER, SMB_GROUP_TRANSPORT="ucx")
        else:
            env.update(SMB_TORCH_GROUP_SIZE=str(layout["ranks_per_site"]))
            argv = site_env(layout, argv)
        argv += ["--mode", mode]
    r = subprocess.run(mpirun(workers, args.per_host, env, argv), text=True, capture_output=True, timeout=1800,
                       env=dict(os.environ, SMB_TESTBED_NAME=NAME))
    with open(os.path.join(log_dir, f"{label.replace(' ', '-')}-{run}.log"), "w") as f:
        f.write(r.stdout + r.stderr)
    if r.returncode != 0:
        raise RuntimeError(f"{label}: training failed: {(r.stdout + r.stderr)[-800:]}")
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def time_to(epochs, target):
    for e in epochs:
        if e["accuracy"] >= target:
            return e["seconds"]
    return None


def median(values):
    """The median of the values present (None where none is)."""
    values = sorted(v for v in values if v is not None)
    return values[len(values) // 2] if values else None


def measure(args, build, log_dir):
    configs = [("DDP over gloo", "ddp-gloo", []),
               ("smb.torch, Horovod averaging", "horovod", []),
               (f"smb.torch, hybrid sync, tau {args.tau}", "sync", ["--tau", str(args.tau)]),
               (f"smb.torch, hybrid seasgd, tau {args.tau}", "seasgd", ["--tau", str(args.tau), "--alpha", "0.5"])]
    if args.sites == 1:
        # h1, h2 workers; h3, h4 the fabric; each worker host's group server on its loopback.
        tb(NAME, "up", "--hosts", "4", "--link", args.link)
        layout = {"workers": ["h1", "h2"], "servers": ["h3", "h4"], "group_servers": [GROUP_SERVER]}
    else:
        # Two sites, each 2 worker hosts and a memory-server host: h1, h2, h3 | h4, h5, h6. Each
        # site's server also serves its group (the site averages over its own links); the
        # fabric (the global weights) is striped over both sites' servers.
        tb(NAME, "up", "--hosts", "6", "--link", args.link, "--sites", "2", "--between", args.between,
           "--rtt", str(args.rtt))
        layout = {"workers": ["h1", "h2", "h4", "h5"], "servers": ["h3", "h6"], "ranks_per_site": 2 * args.per_host}
    layout["build"] = build
    procs = []
    try:
        fabric = []
        for h in layout["servers"]:
            proc, address = start_smbd(NAME, build, h, log_dir, 256 << 20)
            procs.append(proc)
            fabric.append(address)
        if args.sites == 1:
            for h in layout["workers"]:  # each worker host's group server, on its loopback
                proc, _ = start_smbd(NAME, build, h, log_dir, 64 << 20, listen=GROUP_SERVER, data_transport="ucx")
                procs.append(proc)
        else:
            layout["group_servers"] = fabric
        results = {label: {"runs": []} for label, _, _ in configs}
        for run in range(args.repeat):
            for config in configs:  # interleaved, so that a slow minute hits every configuration
                print(f"== run {run + 1}/{args.repeat}: {config[0]}", file=sys.stderr)
                before = [proc_usage(p.pid) for p in procs[:2]]
                epochs = train(config, args, layout, fabric, run, log_dir)
                after = [proc_usage(p.pid) for p in procs[:2]]
                results[config[0]]["runs"].append({
                    "epochs": epochs, "time_to_target": time_to(epochs, args.target),
                    "server_cpu_s": sum(a[0] - b[0] for a, b in zip(after, before)),
                    "server_rss_max": max(a[1] for a in after)})
        return results
    finally:
        for p in procs:
            p.kill()
            p.wait()
        subprocess.run([os.path.join(ROOT, "tools", "testbed", "testbed.sh"), "--name", NAME, "down"],
                       capture_output=True)


def markdown(results, args):
    ddp = median([r["time_to_target"] for r in results["DDP over gloo"]["runs"]])
    if args.sites == 1:
        where = (f"2 worker hosts x {args.per_host} workers, 2 memory-server hosts, links {args.link}; each "
                 f"worker host's group averages through an smbd on its own loopback (SMB_GROUP_SERVERS)")
    else:
        where = (f"two sites, each 2 worker hosts x {args.per_host} workers and a memory-server host, links "
                 f"{args.link} inside a site, the sites joined by {args.between} with a {args.rtt} ms round trip "
                 f"(tools/testbed/delay_link.cpp); a site is a group, averaging through its own server; the "
                 f"global weights are striped over both sites' servers; DDP's ring spans both sites")
    begin, end = (BEGIN, END) if args.sites == 1 else (BEGIN_SITES, END_SITES)
    out = [begin, "",
           f"Measured by `tools/bench/testbed_training.py{' --sites 2' if args.sites == 2 else ''}` on this "
           f"2-core machine: {where}. Median of {args.repeat} runs "
           f"each, interleaved; seconds from the first step until rank 0's test accuracy first reaches "
           f"{args.target:.2f} (a run that never does counts as missing).", "",
           "| run | seconds to target | DDP-gloo time / this time | reached in | final accuracy | "
           "fabric servers' CPU s | fabric servers' RSS (max) |",
           "|---|---|---|---|---|---|---|"]
    for label, r in results.items():
        times = [x["time_to_target"] for x in r["runs"]]
        t = median(times)
        reached = sum(x is not None for x in times)
        final = median([x["epochs"][-1]["accuracy"] for x in r["runs"]])
        cpu = median([x["server_cpu_s"] for x in r["runs"]])
        rss = max(x["server_rss_max"] for x in r["runs"])
        ratio = f"{ddp / t:.2f}" if t and ddp else "n/a"
        shown = f"{t:.2f}" if t else "not reached"
        if label == "DDP over gloo":
            cpu_s, rss_s = "", ""
        else:
            cpu_s, rss_s = f"{cpu:.1f}", f"{rss / 2**20:.0f} MiB"
        out.append(f"| {label} | {shown} | {ratio} | {reached}/{len(times)} runs | {final:.3f} | {cpu_s} | {rss_s} |")
    out += ["", end]
    return "\n".join(out)


def plot(results, args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, r in results.items():
        best = min(r["runs"], key=lambda x: x["time_to_target"] or 1e9)  # each configuration's median-ish run
        ax.plot([e["seconds"] for e in best["epochs"]], [e["accuracy"] for e in best["epochs"]], "o-", label=label,
                markersize=3)
    ax.axhline(args.target, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("seconds (rank 0)")
    ax.set_ylabel("test accuracy")
    ax.set_title("digits across testbed hosts: accuracy against time")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(ROOT, "docs", "img", "testbed-time-to-accuracy.png" if args.sites == 1 else
                        "testbed-two-sites-time-to-accuracy.png")
    fig.savefig(path, dpi=110)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="ci")
    p.add_argument("--build")
    # Defaults by scenario (the ones docs/benchmarks.md records): one site,
    # 2 workers a host for 12 epochs; two sites, 1 a host for 20 (over the
    # slow line fewer, longer-lived workers are what reaches 0.97 at all).
    p.add_argument("--epochs", type=int, help="default: 12, or 20 with --sites 2")
    p.add_argument("--target", type=float, default=0.97)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--tau", type=int, default=4)
    p.add_argument("--per-host", type=int, help="workers per worker host; default: 2, or 1 with --sites 2")
    p.add_argument("--link", default="1gbit")
    p.add_argument("--sites", type=int, choices=(1, 2), default=1,
                   help="2: two sites of 2 worker hosts and a server host each, joined by --between/--rtt")
    p.add_argument("--between", default="100mbit", help="the line between the sites (--sites 2)")
    p.add_argument("--rtt", type=int, default=50, help="its round trip, ms (--sites 2)")
    p.add_argument("--write-docs", action="store_true")
    p.add_argument("--plot", action="store_true")
    args = p.parse_args()
    args.epochs = args.epochs or (12 if args.sites == 1 else 20)
    args.per_host = args.per_host or (2 if args.sites == 1 else 1)
    if os.geteuid() != 0:
        sys.exit("testbed_training: needs root (network namespaces)")
    build = os.path.abspath(args.build) if args.build else os.path.join(ROOT, "build", args.preset)
    log_dir = os.path.join(build, "testbed-training")
    os.makedirs(log_dir, exist_ok=True)
    results = measure(args, build, log_dir)
    with open(os.path.join(log_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    text = markdown(results, args)
    print(text)
    if args.write_docs:
        replace_section(os.path.join(ROOT, "docs", "benchmarks.md"), *((BEGIN, END) if args.sites == 1 else
                                                                       (BEGIN_SITES, END_SITES)), text)
    if args.plot:
        print("plot:", plot(results, args), file=sys.stderr)


if __name__ == "__main__":
    main()
