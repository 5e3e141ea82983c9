#!/usr/bin/python3
"""smb.torch against PyTorch's own gloo, same processes and data, for
docs/benchmarks.md (a benchmark: never a test). Prints markdown tables and
writes PNG plots.

    tools/bench/torch_bench.py [--build build/release] [--out docs/img] [--workers 4] [exchange] [small] [accuracy] [synthetic]

  exchange   per-step exchange time of 8 B, 4 KiB, 1, 10 and 100 MB of
             float32: smb.torch's allreduce (a new tensor) and
             allreduce_ (in place, as gloo's) against
             torch.distributed.all_reduce (gloo), all in the same worker
             processes, ratio gloo/smb; small sizes also against a UCX
             active-message round trip (ucx_perftest)
  small      the fixed cost of an 8 B and a 4 KiB allreduce: gloo,
             hvd.allreduce, the engine under it and the C++ lane under
             that, cold and back to back
  accuracy   time to accuracy on scikit-learn's digits (train_digits.py):
             smb.torch's modes against DDP over gloo, same workers, with
             a plot of test accuracy against wall time
  synthetic  images/s of resnet18 on random data (synthetic_benchmark.py),
             smb.torch against DDP over gloo, 2 and 4 workers

Everything runs on this machine's loopback (shared memory for the fabric,
TCP loopback for gloo): ratios here say nothing about a network.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

from bench_common import PYTHON, ROOT

# 8 B and 4 KiB travel inline (the fixed cost); 1 MB and up through the servers.
SIZES = (8, 4096, 1 << 20, 10 << 20, 100 << 20)

EXCHANGE_WORKER = textwrap.dedent("""
    import json, sys, time, torch, torch.distributed as dist, smb.torch as hvd
    SIZES = %r
    dist.init_process_group("gloo")
    hvd.init()
    torch.set_num_threads(1)
    out = []
    for nbytes in SIZES:
        t = torch.ones(max(1, nbytes // 4))
        iters = 200 if nbytes < (1 << 20) else 20 if nbytes < (100 << 20) else 5
        times = {"gloo": [], "smb": [], "smb_": []}
        runs = (("gloo", lambda: dist.all_reduce(t)),
                ("smb", lambda: hvd.allreduce(t, op=hvd.Sum, name=f"x{nbytes}")),
                ("smb_", lambda: hvd.allreduce_(t, op=hvd.Sum, name=f"x{nbytes}_")))  # in place, as gloo's
        for i in range(iters + 1):
            for name, run in runs:
                t.fill_(1.0)  # in-place sums would grow to inf over the rounds
                dist.barrier()
                started = time.perf_counter()
                run()
                if i:  # the first round creates buffers and connections
                    times[name].append(time.perf_counter() - started)
        out.append({"bytes": nbytes, **{f"{name}_ms": 1000 * sorted(ts)[len(ts) // 2] for name, ts in times.items()}})
    if hvd.rank() == 0:
        print(json.dumps(out), flush=True)
    hvd.shutdown()
    dist.destroy_process_group()
""")


def smbrun(build, np, command, env=None, servers=2, timeout=1800):
    args = [os.path.join(build, "tools", "smbrun", "smbrun"), "-np", str(np), "--local-servers", str(servers),
            "--capacity", "1G", "--"] + command
    full = dict(os.environ, PYTHONPATH=os.path.join(build, "python"), OMP_NUM_THREADS="1", **(env or {}))
    done = subprocess.run(args, env=full, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        sys.exit(f"torch_bench: {' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith(("{", "["))]


# The fixed cost of a small allreduce at four layers, in the same processes:
# gloo's all_reduce, smb.torch's hvd.allreduce, the engine under it
# (smb.collective.data on NumPy bytes: no torch calls), and the C++ lane
# that hvd.allreduce ends in (fabric.InlineLane: the board's allreduce
# with everything fixed per signature converted once, the target's measure). "cold": a gloo
# barrier before every call, so each starts with every rank idle; "b2b":
# back to back. Median of 300 calls.
SMALL_WORKER = textwrap.dedent("""
    import json, time, numpy as np, torch, torch.distributed as dist, smb.torch as hvd
    from smb.collective import data, process_sets
    dist.init_process_group("gloo")
    hvd.init()
    torch.set_num_threads(1)
    group = process_sets.group_of(process_sets.global_process_set, "Allreduce")
    out = {}
    for nbytes in (8, 4096):
        t = torch.ones(nbytes // 4)
        a = np.ones(nbytes // 4, dtype=np.float32)
        view = data.Tensor(a.view(np.uint8), "float32", a.shape, 4)
        lane = data.allreduce_lane(group, f"lane{nbytes}", view, "sum", 1.0)
        result = np.empty(nbytes, dtype=np.uint8)
        addresses = (a.ctypes.data, result.ctypes.data)
        runs = {"gloo": lambda: dist.all_reduce(t),
                "smb": lambda: hvd.allreduce(t, op=hvd.Sum, name=f"small{nbytes}"),
                "engine": lambda: data.allreduce(group, f"engine{nbytes}", view, "sum", 1.0, 1.0),
                "lane": lambda: lane(*addresses, lambda: result)}
        for mode in ("cold", "b2b"):
            for name, run in runs.items():
                times = []
                dist.barrier()
                for i in range(301):
                    if mode == "cold":
                        dist.barrier()
                    started = time.perf_counter()
                    run()
                    if i:  # the first call creates buffers and connections
                        times.append(time.perf_counter() - started)
                out[f"{nbytes} {mode} {name}"] = 1e6 * sorted(times)[len(times) // 2]
    if hvd.rank() == 0:
        print(json.dumps(out), flush=True)
    hvd.shutdown()
    dist.destroy_process_group()
""")


def small(args):
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(SMALL_WORKER)
    try:
        runs = [smbrun(args.build, args.workers, [PYTHON, f.name])[0] for _ in range(args.runs)]
    finally:
        os.unlink(f.name)
    print_small(runs, args.workers, ucx_am_round_trip_us())


def print_small(runs, workers, am_rtt_us):
    """small()'s table from the SMALL_WORKER outputs of `runs` (also tools/gpu-check.sh's)."""
    hops = max(1, (workers - 1).bit_length())
    print(f"\n### A small allreduce's fixed cost, {workers} workers, us (median of {len(runs)} runs)\n")
    print(f"UCX active-message round trip here: {am_rtt_us:.2f} us; the target (5 x that x log2 ranks): "
          f"{5 * am_rtt_us * hops:.1f} us.\n" if am_rtt_us else "ucx_perftest did not run.\n")
    print("| size | calls | gloo all_reduce | hvd.allreduce | engine | C++ lane | gloo / hvd | gloo / engine | "
          "lane / target |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    target = 5 * am_rtt_us * hops if am_rtt_us else None
    for nbytes in (8, 4096):
        for mode in ("cold", "b2b"):
            got = {n: statistics.median(r[f"{nbytes} {mode} {n}"] for r in runs)
                   for n in ("gloo", "smb", "engine", "lane")}
            against_target = f"{got['lane'] / target:.2f}" if target else "-"
            print(f"| {nbytes} B | {mode} | {got['gloo']:.1f} | {got['smb']:.1f} | {got['engine']:.1f} | "
                  f"{got['lane']:.1f} | {got['gloo'] / got['smb']:.2f} | {got['gloo'] / got['engine']:.2f} | "
                  f"{against_target} |")


def exchange(args):
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(EXCHANGE_WORKER % (SIZES,))
    try:
        runs = [smbrun(args.build, args.workers, [PYTHON, f.name])[0] for _ in range(args.runs)]
    finally:
        os.unlink(f.name)
    am_rtt_us = ucx_am_round_trip_us()
    print(f"\n### Exchange time, {args.workers} workers, {args.runs} runs (median of the run medians)\n")
    print(f"A UCX active-message round trip between two processes here (ucx_perftest ucp_am_lat, 8 B, median, "
          f"twice the one-way figure): {am_rtt_us:.1f} us.\n" if am_rtt_us else "ucx_perftest did not run: no "
          "UCX round trip to compare with.\n")
    print("| size | gloo all_reduce (ms) | smb.torch allreduce (ms) | gloo / smb | smb / (UCX round trip x log2 ranks) "
          "| smb.torch allreduce_, in place (ms) | gloo / allreduce_ |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    hops = max(1, (args.workers - 1).bit_length())
    for i, nbytes in enumerate(SIZES):
        gloo = statistics.median(r[i]["gloo_ms"] for r in runs)
        smb = statistics.median(r[i]["smb_ms"] for r in runs)
        in_place = statistics.median(r[i]["smb__ms"] for r in runs)
        floor = f"{smb * 1000 / (am_rtt_us * hops):.0f}" if am_rtt_us and nbytes < (1 << 20) else "-"
        label = f"{nbytes >> 20} MB" if nbytes >= (1 << 20) else f"{nbytes} B"
        print(f"| {label} | {gloo:.3f} | {smb:.3f} | {gloo / smb:.2f} | {floor} | {in_place:.3f} | {gloo / in_place:.2f} |")


def ucx_am_round_trip_us(port=13999):
    """Twice ucx_perftest's median one-way latency of an 8-byte UCP active
    message between two processes on this machine; None without ucx_perftest."""
    try:
        server = subprocess.Popen(["ucx_perftest", "-p", str(port)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
    except FileNotFoundError:
        return None
    try:
        for _ in range(20):  # the server needs a moment to listen
            done = subprocess.run(["ucx_perftest", "127.0.0.1", "-p", str(port), "-t", "ucp_am_lat", "-s", "8",
                                   "-n", "20000", "-w", "1000", "-f"], capture_output=True, text=True, timeout=120)
            numbers = done.stdout.split()
            if done.returncode == 0 and len(numbers) >= 2:
                return 2 * float(numbers[-7])  # the 50th percentile column
            time.sleep(0.25)
        return None
    finally:
        server.kill()
        server.wait()


def time_to(curve, target):
    for point in curve:
        if point["accuracy"] >= target:
            return point["seconds"]
    return None


def accuracy(args):
    example = os.path.join(ROOT, "plugins", "torch", "examples", "train_digits.py")
    runs = {
        "smb.torch, Horovod averaging": ["--mode", "horovod", "--epochs", "12"],
        "smb.torch, hybrid seasgd (2 groups)": ["--mode", "seasgd", "--epochs", "30"],
        "smb.torch, hybrid sync (2 groups)": ["--mode", "sync", "--epochs", "30"],
        "DDP over gloo": ["--baseline", "ddp-gloo", "--epochs", "12"],
    }
    curves = {}
    for label, flags in runs.items():
        curves[label] = smbrun(args.build, args.workers, [PYTHON, example, "--json"] + flags,
                               env={"SMB_TORCH_GROUP_SIZE": str(max(1, args.workers // 2))})
    target = args.target
    ddp = time_to(curves["DDP over gloo"], target)
    print(f"\n### Time to {target:.0%} test accuracy on digits, {args.workers} workers\n")
    print("| run | seconds to target | final accuracy | DDP-gloo time / this time |")
    print("|---|---:|---:|---:|")
    for label, curve in curves.items():
        t = time_to(curve, target)
        ratio = f"{ddp / t:.2f}" if t and ddp else "-"
        print(f"| {label} | {t:.1f} | {curve[-1]['accuracy']:.3f} | {ratio} |" if t else
              f"| {label} | not reached | {curve[-1]['accuracy']:.3f} | - |")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, curve in curves.items():
        ax.plot([p["seconds"] for p in curve], [p["accuracy"] for p in curve], marker="o", markersize=3,
                label=label)
    ax.axhline(target, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0.5, 1.0)
    ax.set_title(f"digits CNN, {args.workers} workers on one 2-core machine")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path = os.path.join(args.out, "torch-time-to-accuracy.png")
    fig.savefig(path, dpi=110)
    print(f"\n![test accuracy against wall time]({os.path.relpath(path, os.path.join(ROOT, 'docs'))})")


def synthetic(args):
    example = os.path.join(ROOT, "plugins", "torch", "examples", "synthetic_benchmark.py")
    print("\n### resnet18, random data, batch 8 per worker, 112x112 images (images/s per worker)\n")
    print("smb.torch's exchange per step runs from its first bucket's start to the end of synchronize(); "
          "hidden is the part of it that ran while backward was still running.\n")
    print("| workers | DDP over gloo | smb.torch DistributedOptimizer | DDP over the `smb` backend "
          "| smb.torch / gloo | DDP-smb / gloo | smb.torch exchange ms/step | hidden behind backward |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for workers in (2, 4):
        flags = [PYTHON, example, "--json", "--model", "resnet18", "--batch-size", "8"]
        runs = {b: smbrun(args.build, workers, flags + ["--baseline", b])[0] for b in ("ddp-gloo", "none", "ddp-smb")}
        rate = {b: r["images_per_second_per_worker"] for b, r in runs.items()}
        gloo, smb, ddp_smb = rate["ddp-gloo"], rate["none"], rate["ddp-smb"]
        own = runs["none"]
        print(f"| {workers} | {gloo:.1f} | {smb:.1f} | {ddp_smb:.1f} | {smb / gloo:.2f} | {ddp_smb / gloo:.2f} "
              f"| {own.get('exchange_ms_per_step', float('nan')):.0f} | {own.get('hidden_fraction', 0):.0%} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", nargs="*", default=["exchange", "accuracy", "synthetic"])
    parser.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "img"))
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--target", type=float, default=0.97)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for what in args.what:
        {"exchange": exchange, "small": small, "accuracy": accuracy, "synthetic": synthetic}[what](args)


if __name__ == "__main__":
    main()
