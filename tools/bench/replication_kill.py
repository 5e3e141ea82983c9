#!/usr/bin/python3
"""What a kill -9 of a memory server costs a buffer with one copy of each
stripe and with two. A benchmark, not a test (issue "Losing a memory server
loses nothing"; the tests are tests/integration/replication_test.cpp).

For replicas = 1 and 2, --repeat times each: three smbd on loopback, one
client accumulating 1.0 into every f64 element of a buffer (a stripe on
each server) as fast as it can; after --before acknowledged ops, one smbd
is killed (SIGKILL) and the client goes on for --after more ops (or until
an op fails). Then it reports:
  acked          accumulates that returned
  lost           acknowledged accumulates whose effect cannot be read back
                 any more (per element: acked - value, the worst element;
                 an element on a dead server's only copy lost them all)
  seen_ms        kill -> the client's first op that failed (replicas = 1),
                 or kill -> the first op that completed after it
  stall_ms       the longest time between two acknowledged ops around the kill

Usage: tools/bench/replication_kill.py [--preset ci | --build DIR] [--repeat 3] [--before 300] [--after 300]
                                      [--ucx-tls tcp,self]
  --ucx-tls   UCX_TLS for the servers and the client (default: unset, shared memory)
"""

import argparse
import os
import statistics
import sys
import threading
import time

from bench_common import ROOT  # noqa: E402
STRIPE = 4096


def run_once(fabric_mod, smb, np, replicas, before, after, victim):
    with fabric_mod.Fabric(3, "128M") as fab:
        client = smb.Client(servers=fab.server_list, timeout=5.0)
        count = 3 * STRIPE // 8 * 4
        buf = client.create("sums", count * 8, stripe_unit=STRIPE, replicas=replicas)
        buf.write(0, np.zeros(count))
        ones = np.ones(count)
        acks = []        # completion time of each acknowledged op
        failure = {}
        stop = threading.Event()

        def work():
            try:
                while not stop.is_set():
                    buf.apply("accumulate", offset=0, x=ones)
                    acks.append(time.monotonic())
            except smb.Error as e:
                failure["at"] = time.monotonic()
                failure["error"] = str(e)

        t = threading.Thread(target=work)
        t.start()
        while len(acks) < before and not failure:
            time.sleep(0.001)
        killed_at = time.monotonic()
        acked_at_kill = len(acks)
        fab.kill(victim)
        deadline = time.monotonic() + 20
        while len(acks) < acked_at_kill + after and not failure and time.monotonic() < deadline:
            time.sleep(0.001)
        stop.set()
        t.join()
        acked = len(acks)
        # What can still be read: each stripe on its own (a stripe whose only copy died fails).
        readable = np.full(count, np.nan)
        per_stripe = STRIPE // 8
        for first in range(0, count, per_stripe):
            part = np.empty(per_stripe)
            try:
                buf.read(first * 8, part)
                readable[first:first + per_stripe] = part
            except smb.Error:
                pass
        lost = int(max(acked - (0 if np.isnan(v) else v) for v in readable))
        after_kill = [a for a in acks if a > killed_at]
        seen = (failure["at"] if failure else (after_kill[0] if after_kill else deadline)) - killed_at
        around = [killed_at] + [a for a in acks if a > killed_at - 1.0]
        gaps = [b - a for a, b in zip(sorted(around), sorted(around)[1:])]
        return {"acked": acked, "lost": lost, "seen_ms": seen * 1000, "stall_ms": max(gaps, default=0) * 1000,
                "error": failure.get("error", "")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="ci")
    ap.add_argument("--build")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--before", type=int, default=300)
    ap.add_argument("--after", type=int, default=300)
    ap.add_argument("--ucx-tls")
    args = ap.parse_args()
    if args.ucx_tls:
        os.environ["UCX_TLS"] = args.ucx_tls
    build = args.build or os.path.join(ROOT, "build", args.preset)
    os.environ.setdefault("SMB_SMBD", os.path.join(build, "smb-server", "smbd"))
    sys.path.insert(0, os.path.join(build, "python"))
    sys.path.insert(0, os.path.join(ROOT, "plugins", "python", "tests"))
    import fabric as fabric_mod  # noqa: E402  (the tests' smbd launcher)
    import numpy as np  # noqa: E402
    import smb  # noqa: E402

    print("| replicas | run | acked | lost | seen (ms) | longest stall (ms) | error |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for replicas in (1, 2):
        rows = []
        for run in range(args.repeat):
            r = run_once(fabric_mod, smb, np, replicas, args.before, args.after, victim=run % 3)
            rows.append(r)
            print(f"| {replicas} | {run + 1} | {r['acked']} | {r['lost']} | {r['seen_ms']:.0f} | {r['stall_ms']:.0f} "
                  f"| {r['error'][:90]} |", flush=True)
        print(f"| {replicas} | median | {statistics.median(r['acked'] for r in rows):.0f} "
              f"| {statistics.median(r['lost'] for r in rows):.0f} | {statistics.median(r['seen_ms'] for r in rows):.0f} "
              f"| {statistics.median(r['stall_ms'] for r in rows):.0f} | |", flush=True)


if __name__ == "__main__":
    main()
