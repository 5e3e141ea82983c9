#!/usr/bin/python3
"""Small-op latency of the fabric against UCX's own, in one run. A benchmark,
not a test (issue "Small operations at transport speed").

For each UCX transport on loopback -- shared memory (UCX_TLS unset) and TCP
(UCX_TLS=tcp,self) -- it measures, server and client pinned to different CPUs:
  ucx_perftest  ucp_fadd, ucp_cswap, ucp_put_lat (8 B) and ucp_am_lat
                (8 B .. 1 MiB): the transport's own latency (p50);
  smb-bench     fetch-add, compare-swap, accumulate (one f32 .. 1 MiB of
                f32 in one call), notify (version bump to wake, half a round
                trip), barrier of 2 and 8 parties, against one smbd on the
                same transport: p50 and p99;
and prints each ratio against the issue's targets:
  fetch-add p50            <= 3 x ucp_fadd p50
  accumulate 4 KiB p50     <= 5 x the ucp_am_lat round trip of 4 KiB
                              (2 x its one-way p50; the add itself is
                              ~0.1 us of memory time and left out)
  accumulate 4 KiB p99     <= 10 x its p50
  notify-to-wake p50       <= 5 x the 8 B ucp_am_lat round trip
and, to explain notify on a machine of two cores, where both clients of the
notify ping-pong share one CPU: the cost of two processes taking turns on
one CPU (`perf bench sched pipe` pinned to the client CPU: a round trip is
two switches), and notify / (one 4 B accumulate call + one switch).

Usage: tools/bench/latency.py [--preset ci | --build DIR] [--iters N] [--repeat N] [--poll] [--smbd-arg ARG]...
                              [--write-docs] [--plot]
  --repeat      whole measurements (default 5): the table gives medians, and each
                ratio's range over the runs (this machine's noise is 2x and more)
  --poll        run smbd with --poll (busy-polling progress)
  --smbd-arg    one more smbd argument, e.g. --smbd-arg=--spin-us=0 (sleep
                at once after work, as smbd did before it spun)
  --write-docs  replace the latency section of docs/benchmarks.md
  --plot        write docs/img/latency-vs-size.png (matplotlib)
Results (JSON, logs) go to build/PRESET/latency/.
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time

from bench_common import BENCHMARKS_MD, ROOT, replace_section  # noqa: E402
TRANSPORTS = [("shared memory", None), ("tcp", "tcp,self")]
ACCUMULATE_SIZES = [4, 64, 1024, 4096, 65536, 1 << 20]
AM_SIZES = [8, 64, 1024, 4096, 65536, 1 << 20]
SERVER_CPU, CLIENT_CPU = ("0", "1") if os.cpu_count() >= 2 else ("0", "0")
BEGIN, END = "<!-- latency:begin -->", "<!-- latency:end -->"
SMBD = None  # --smbd


def env_for(tls):
    env = dict(os.environ)
    env.pop("UCX_TLS", None)
    if tls:
        env["UCX_TLS"] = tls
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listen(port, seconds=15):
    deadline = time.time() + seconds
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    return False


def perftest(tls, test, size, iters, log_dir):
    """One ucx_perftest server/client pair; the p50 latency in us."""
    return perftest_final(tls, test, size, iters, log_dir)[1]


def perftest_final(tls, test, size, iters, log_dir, warmup=None):
    """One ucx_perftest server/client pair; its "Final:" row as numbers:
    iterations, p50 and average and overall latency (us), average and
    overall bandwidth (MiB/s), average and overall rate."""
    port = free_port()
    tag = f"{tls or 'shm'}-{test}-{size}"
    with open(os.path.join(log_dir, f"perftest-{tag}-server.log"), "w") as slog:
        server = subprocess.Popen(["taskset", "-c", SERVER_CPU, "ucx_perftest", "-p", str(port)],
                                  env=env_for(tls), stdout=slog, stderr=subprocess.STDOUT)
    try:
        # ucx_perftest's server has no ready line; its port is its sign of life.
        time.sleep(0.3)
        client = subprocess.run(["taskset", "-c", CLIENT_CPU, "ucx_perftest", "127.0.0.1", "-p", str(port), "-t", test,
                                 "-s", str(size), "-n", str(iters), "-w", str(warmup or max(100, iters // 20))],
                                env=env_for(tls), capture_output=True, text=True, timeout=300)
    finally:
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    with open(os.path.join(log_dir, f"perftest-{tag}-client.log"), "w") as clog:
        clog.write(client.stdout + client.stderr)
    final = [line for line in client.stdout.splitlines() if line.startswith("Final:")]
    if client.returncode != 0 or not final:
        raise RuntimeError(f"ucx_perftest {test} -s {size} over {tls or 'shm'} failed: {client.stderr[-400:]}")
    return [float(x) for x in final[-1].split()[1:]]


class Smbd:
    def __init__(self, build, tls, log_dir, extra_args=(), capacity="256M"):
        self.log = open(os.path.join(log_dir, f"smbd-{tls or 'shm'}.log"), "w+")
        self.proc = subprocess.Popen(["taskset", "-c", SERVER_CPU, SMBD or os.path.join(build, "smb-server", "smbd"),
                                      "--listen", "127.0.0.1:0", "--capacity", capacity, *extra_args],
                                     env=env_for(tls), stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            self.log.seek(0)
            m = re.search(r"smbd ready on (\S+)", self.log.read())
            if m:
                self.address = m.group(1)
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"smbd did not start (log: {self.log.name})")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=20)
        self.log.close()


def bench(build, tls, server, *args):
    doc = bench_json(build, tls, server, *args)
    return {"p50": doc["p50_us"], "p99": doc["p99_us"], "path": doc["paths"][0]}


def bench_json(build, tls, server, *args):
    """smb-bench's --json report of one run against `server`."""
    cmd = ["taskset", "-c", CLIENT_CPU, os.path.join(build, "tools", "smb-bench"), "--servers", server, "--json",
           *map(str, args)]
    r = subprocess.run(cmd, env=env_for(tls), capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr[-400:]}")
    return json.loads(r.stdout)


def switch_us():
    """Half a `perf bench sched pipe` round trip with both processes on the
    client CPU: one hand-over between two processes sharing a core. None
    where perf is not installed (Debian: linux-perf)."""
    try:
        r = subprocess.run(["taskset", "-c", CLIENT_CPU, "perf", "bench", "sched", "pipe", "-l", "100000"],
                           capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"([0-9.]+)\s+usecs/op", r.stdout)
    return float(m.group(1)) / 2 if r.returncode == 0 and m else None


def measure(build, tls, iters, log_dir, smbd_args=()):
    out = {"perftest": {}, "smb": {}}
    pt = out["perftest"]
    pt["fadd"] = perftest(tls, "ucp_fadd", 8, iters, log_dir)
    pt["cswap"] = perftest(tls, "ucp_cswap", 8, iters, log_dir)
    pt["put_lat"] = perftest(tls, "ucp_put_lat", 8, iters, log_dir)
    pt["am_lat"] = {size: perftest(tls, "ucp_am_lat", size, iters if size <= 65536 else iters // 10, log_dir)
                    for size in AM_SIZES}
    pt["switch"] = switch_us()
    server = Smbd(build, tls, log_dir, smbd_args)
    try:
        smb = out["smb"]
        smb["write8"] = bench(build, tls, server.address, "--op", "write", "--size", "8", "--block", "8",
                              "--iters", iters)
        smb["fetch_add"] = bench(build, tls, server.address, "--op", "fetch-add", "--size", "4K", "--iters", iters)
        smb["compare_swap"] = bench(build, tls, server.address, "--op", "compare-swap", "--size", "4K",
                                    "--iters", iters)
        smb["accumulate"] = {}
        for size in ACCUMULATE_SIZES:
            n = iters if size <= 65536 else max(200, iters // 20)
            smb["accumulate"][size] = bench(build, tls, server.address, "--op", "accumulate", "--size", size,
                                            "--block", size, "--iters", n)
        smb["notify"] = bench(build, tls, server.address, "--op", "notify", "--size", "8", "--iters", iters // 5)
        for parties in (2, 8):
            smb[f"barrier{parties}"] = bench(build, tls, server.address, "--op", "barrier", "--size", "8",
                                             "--threads", parties, "--iters", iters // 10)
    finally:
        server.stop()
    return out


def ratios(m):
    """(what, ratio, target or None) rows for one transport."""
    pt, smb = m["perftest"], m["smb"]
    rt = {size: 2 * one_way for size, one_way in pt["am_lat"].items()}
    acc4k = smb["accumulate"][4096]
    return [
        ("fetch-add p50 / ucp_fadd p50", smb["fetch_add"]["p50"] / pt["fadd"], 3),
        ("compare-swap p50 / ucp_cswap p50", smb["compare_swap"]["p50"] / pt["cswap"], 3),
        ("accumulate 4 KiB p50 / ucp_am_lat 4 KiB round trip", acc4k["p50"] / rt[4096], 5),
        ("accumulate 4 KiB p99 / its p50", acc4k["p99"] / acc4k["p50"], 10),
        ("notify-to-wake p50 / ucp_am_lat 8 B round trip", smb["notify"]["p50"] / rt[8], 5),
        ("barrier of 2 p50 / ucp_am_lat 8 B round trip", smb["barrier2"]["p50"] / rt[8], None),
        ("barrier of 8 p50 / ucp_am_lat 8 B round trip", smb["barrier8"]["p50"] / rt[8], None),
        ("write 8 B p50 / ucp_put_lat p50", smb["write8"]["p50"] / pt["put_lat"], None),
    ] + ([("notify-to-wake p50 / (accumulate 4 B call p50 + one switch on a shared CPU)",
           smb["notify"]["p50"] / (smb["accumulate"][4]["p50"] + pt["switch"]), None)] if pt.get("switch") else [])


def median_run(runs):
    """One run whose every number is the median over `runs` (same shape)."""
    first = runs[0]
    if isinstance(first, dict):
        return {k: median_run([r[k] for r in runs]) for k in first}
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        values = sorted(r for r in runs if r is not None)
        return values[len(values) // 2] if values else None
    return first


def markdown(results):
    repeats = len(next(iter(results.values())))
    lines = [BEGIN, "",
             "Measured by `tools/bench/latency.py` (one smbd and one client process on this 2-core machine, pinned "
             "to different CPUs; UCX's `ucx_perftest` in the same run). Latencies in microseconds, p50 unless "
             f"marked, each the median of {repeats} run(s) of the whole measurement. Ratios are smb / UCX, each "
             "taken within one run; the table gives their median and, in brackets, their range over the runs; "
             "a target is the issue's bound, judged on the median.", ""]
    for label, _ in TRANSPORTS:
        runs = results[label]
        m = median_run(runs)
        pt, smb = m["perftest"], m["smb"]
        lines += [f"### {label}", "", f"Path: `{smb['fetch_add']['path']}`", "",
                  "| operation | smb p50 | smb p99 | UCX reference (p50) |", "|---|---|---|---|",
                  f"| write 8 B | {smb['write8']['p50']:.2f} | {smb['write8']['p99']:.2f} | "
                  f"ucp_put_lat {pt['put_lat']:.2f} |",
                  f"| fetch-add | {smb['fetch_add']['p50']:.2f} | {smb['fetch_add']['p99']:.2f} | "
                  f"ucp_fadd {pt['fadd']:.2f} |",
                  f"| compare-swap | {smb['compare_swap']['p50']:.2f} | {smb['compare_swap']['p99']:.2f} | "
                  f"ucp_cswap {pt['cswap']:.2f} |"]
        for size in ACCUMULATE_SIZES:
            a = smb["accumulate"][size]
            am = pt["am_lat"].get(size if size >= 8 else 8)
            lines.append(f"| accumulate {size} B | {a['p50']:.2f} | {a['p99']:.2f} | "
                         f"ucp_am_lat round trip {2 * am:.2f} ({max(size, 8)} B) |")
        lines += [f"| notify to wake | {smb['notify']['p50']:.2f} | {smb['notify']['p99']:.2f} | "
                  f"ucp_am_lat round trip {2 * pt['am_lat'][8]:.2f} (8 B) |",
                  f"| barrier of 2 | {smb['barrier2']['p50']:.2f} | {smb['barrier2']['p99']:.2f} | |",
                  f"| barrier of 8 | {smb['barrier8']['p50']:.2f} | {smb['barrier8']['p99']:.2f} | |"]
        if pt.get("switch"):
            lines.append(f"| (two processes taking turns on one CPU) | | | `perf bench sched pipe`: "
                         f"{pt['switch']:.2f} per switch |")
        lines += ["",
                  "| ratio | value | target | |", "|---|---|---|---|"]
        per_run = [ratios(r) for r in runs]
        for i, (what, _, target) in enumerate(per_run[0]):
            values = sorted(run[i][1] for run in per_run if i < len(run))
            value = values[len(values) // 2]
            spread = f" [{values[0]:.1f}-{values[-1]:.1f}]" if len(values) > 1 else ""
            verdict = "" if target is None else ("meets" if value <= target else "**misses**")
            lines.append(f"| {what} | {value:.1f}{spread} | {'' if target is None else f'<= {target}'} | {verdict} |")
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def write_docs(text):
    replace_section(BENCHMARKS_MD, BEGIN, END, text, heading="## Small operations: latency against UCX")


def plot(results):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, _ in TRANSPORTS:
        m = median_run(results[label])
        sizes = ACCUMULATE_SIZES
        ax.plot(sizes, [m["smb"]["accumulate"][s]["p50"] for s in sizes], "o-", label=f"smb accumulate p50, {label}")
        ax.plot(AM_SIZES, [2 * m["perftest"]["am_lat"][s] for s in AM_SIZES], "s--",
                label=f"ucp_am_lat round trip, {label}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("bytes per call")
    ax.set_ylabel("latency (us)")
    ax.set_title("Server-side accumulate call against a UCX active-message round trip")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    out = os.path.join(ROOT, "docs", "img", "latency-vs-size.png")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    fig.savefig(out, dpi=110)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="ci")
    p.add_argument("--build", help="the build directory (default build/PRESET): e.g. an older build, to compare")
    p.add_argument("--iters", type=int, default=10000)
    p.add_argument("--repeat", type=int, default=5, help="whole measurements; medians are reported")
    p.add_argument("--write-docs", action="store_true")
    p.add_argument("--plot", action="store_true")
    p.add_argument("--poll", action="store_true", help="smbd --poll")
    p.add_argument("--smbd-arg", action="append", default=[], help="one more smbd argument (repeatable)")
    p.add_argument("--smbd", help="this smbd binary instead of the build's (e.g. an older one, to compare)")
    args = p.parse_args()
    global SMBD
    SMBD = args.smbd
    build = os.path.abspath(args.build) if args.build else os.path.join(ROOT, "build", args.preset)
    smbd_args = (["--poll"] if args.poll else []) + args.smbd_arg
    mode = "poll" if args.poll else "idle"
    if args.smbd_arg:
        mode += "-" + re.sub(r"[^A-Za-z0-9]+", "", "".join(args.smbd_arg))
    log_dir = os.path.join(build, "latency-" + ("old-" if args.smbd else "") + mode)
    os.makedirs(log_dir, exist_ok=True)
    results = {label: [] for label, _ in TRANSPORTS}
    for run in range(args.repeat):
        for label, tls in TRANSPORTS:
            print(f"== run {run + 1}/{args.repeat}: {label} (UCX_TLS={tls or 'unset'})", file=sys.stderr)
            results[label].append(measure(build, tls, args.iters, log_dir, smbd_args))
    with open(os.path.join(log_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    text = markdown(results)
    print(text)
    if args.write_docs:
        write_docs(text)
    if args.plot:
        print("plot:", plot(results), file=sys.stderr)


if __name__ == "__main__":
    main()
