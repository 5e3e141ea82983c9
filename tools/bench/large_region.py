#!/usr/bin/python3
"""Large regions on shared memory: the fabric against UCX, in one run. A
benchmark, not a test (issue "Many hosts on one machine", item "Large regions
on shared memory", target ratio 0.8).

Models are 100 MB to many GB, so the case that matters is a region far larger
than the CPU caches. For each page kind the pool can have -- normal 4 KiB
pages, and 2 MiB huge pages when this process may reserve them (root:
vm.nr_hugepages is raised for the run and put back after) -- it measures,
server and client pinned to different CPUs, UCX_TLS unset (UCX picks its
shared-memory transports):
  ucx_perftest  ucp_put_bw and ucp_get with SIZE messages, PASSES iterations;
  smb-bench     write then read of a SIZE buffer on one smbd in 1 MiB ops,
                PASSES passes, plus one single pass (a fresh client's first
                touch of the mapped pool);
each whole measurement --repeat times, and prints medians and ratio ranges.

Usage: tools/bench/large_region.py [--preset ci | --build DIR] [--size 256M] [--passes 16]
                                   [--repeat 3] [--pages normal,huge] [--write-docs]
  --write-docs  replace the large-region section of docs/benchmarks.md
Logs go to build/PRESET/large-region/.
"""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import latency  # noqa: E402  (the same ucx_perftest / smbd / smb-bench runners)
from bench_common import parse_size, replace_section  # noqa: E402

BEGIN, END = "<!-- large-region:begin -->", "<!-- large-region:end -->"
NR_HUGEPAGES = "/proc/sys/vm/nr_hugepages"
HUGE_PAGE = 2 << 20
MiB = 1 << 20


def set_huge_pages(count):
    with open(NR_HUGEPAGES, "w") as f:
        f.write(str(count))
    with open(NR_HUGEPAGES) as f:
        return int(f.read())


def measure(build, size, passes, log_dir):
    """One whole measurement at the current page reservation."""
    size_arg = str(size)
    m = {}
    # perftest: one warm-up message, like the smb-bench passes after the first.
    m["perftest write"] = latency.perftest_final(None, "ucp_put_bw", size, passes, log_dir, warmup=1)[5] * MiB
    m["perftest read"] = latency.perftest_final(None, "ucp_get", size, passes, log_dir, warmup=1)[5] * MiB
    server = latency.Smbd(build, None, log_dir, capacity=str(2 * size))
    try:
        for op in ("write", "read"):
            doc = latency.bench_json(build, None, server.address, "--name", "large-region", "--op", op,
                                     "--size", size_arg, "--block", "1M", "--iters", passes)
            m[f"smb {op}"] = doc["bandwidth_bytes_per_s"]
            m["path"] = doc["paths"][0]
        # A new client's first pass: its first touch of every page of the mapped pool.
        doc = latency.bench_json(build, None, server.address, "--name", "large-region", "--op", "write",
                                 "--size", size_arg, "--block", "1M", "--iters", 1)
        m["smb first write"] = doc["bandwidth_bytes_per_s"]
    finally:
        server.stop()
    with open(os.path.join(log_dir, "smbd-shm.log")) as f:
        m["pool"] = "huge" if "(huge pages)" in f.read() else "normal"
    return m


def markdown(results, size, passes):
    lines = [BEGIN, "",
             f"`tools/bench/large_region.py` (UCX_TLS unset: shared memory; a {size // MiB} MiB region;",
             f"ucx_perftest moves it as one message per iteration, {passes} iterations after one warm-up;",
             f"smb-bench in 1 MiB ops, {passes} passes, through one smbd; medians of",
             f"{len(next(iter(results.values())))} whole runs, ratio ranges in brackets; MiB/s):", "",
             "| pages | op | ucx_perftest | smb-bench | **ratio** | a fresh client's first pass |",
             "|---|---|---:|---:|---:|---:|"]
    for pages, runs in results.items():
        for op in ("write", "read"):
            ref = [r[f"perftest {op}"] for r in runs]
            smb = [r[f"smb {op}"] for r in runs]
            ratios = [s / p for s, p in zip(smb, ref)]
            first = ""
            if op == "write":
                first = f"{statistics.median(r['smb first write'] for r in runs) / MiB:,.0f}"
            lines.append(f"| {pages} (pool: {runs[0]['pool']}) | {op} | {statistics.median(ref) / MiB:,.0f} "
                         f"| {statistics.median(smb) / MiB:,.0f} | **{statistics.median(ratios):.2f}** "
                         f"[{min(ratios):.2f}-{max(ratios):.2f}] | {first} |")
    lines += ["", f"Data path: {next(iter(results.values()))[0]['path']}.", "", END]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="ci")
    ap.add_argument("--build")
    ap.add_argument("--size", default="256M")
    ap.add_argument("--passes", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pages", default="normal,huge")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    build = args.build or os.path.join(latency.ROOT, "build", args.preset)
    size = parse_size(args.size)
    log_dir = os.path.join(build, "large-region")
    os.makedirs(log_dir, exist_ok=True)

    with open(NR_HUGEPAGES) as f:
        reserved_before = int(f.read())
    # Huge pages for smbd's pool (2 x size) and perftest's two buffers, with room to spare.
    wanted = {"normal": 0, "huge": (4 * size) // HUGE_PAGE + 64}
    results = {}
    try:
        for pages in args.pages.split(","):
            try:
                got = set_huge_pages(wanted[pages])
            except OSError as e:
                print(f"large_region: skipping {pages} pages: cannot set {NR_HUGEPAGES} ({e}; needs root)",
                      file=sys.stderr)
                continue
            if got < wanted[pages]:
                print(f"large_region: skipping {pages} pages: only {got} of {wanted[pages]} huge pages reserved",
                      file=sys.stderr)
                continue
            results[pages] = []
            for i in range(args.repeat):
                m = measure(build, size, args.passes, log_dir)
                print(f"{pages} pages, run {i + 1}: " + ", ".join(
                    f"{k} {v / MiB:,.0f}" for k, v in m.items() if isinstance(v, float)), file=sys.stderr)
                results[pages].append(m)
    finally:
        try:
            set_huge_pages(reserved_before)
        except OSError:
            pass
    if not results:
        sys.exit("large_region: nothing measured")
    text = markdown(results, size, args.passes)
    print(text)
    if args.write_docs:
        replace_section(os.path.join(latency.ROOT, "docs", "benchmarks.md"), BEGIN, END, text)


if __name__ == "__main__":
    main()
