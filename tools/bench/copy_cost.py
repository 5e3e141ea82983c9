#!/usr/bin/python3
"""What each extra copy costs an ordered op (issue 36, item 4).

One client, three smbd, three buffers of 3 stripes of 4 KiB: one copy, two
and three. Rounds alternate between them, so that a slow moment of the
machine falls on all three. Each round times --iters fetch-adds of one
word and --iters accumulates of one f64 on each buffer. An unreplicated
buffer's fetch-add is a one-sided atomic; with copies, every ordered op is
a server call per copy, one after the other down the chain
(smb-client/ordered_ops.cpp). Prints the median time per op and its ratio
to one copy, and writes nothing else.

  /usr/bin/python3 tools/bench/copy_cost.py [--build build/ci] [--iters 2000] [--rounds 5] [--ucx-tls tcp,self]
"""

import argparse
import os
import statistics
import sys

from bench_common import ROOT, seconds_per_call as per_op

STRIPE = 4096


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build", "ci"))
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--ucx-tls", help="UCX_TLS for the servers and the client (default: unset, shared memory)")
    args = p.parse_args()
    if args.ucx_tls:
        os.environ["UCX_TLS"] = args.ucx_tls
    build = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(build, "python"))
    sys.path.insert(0, os.path.join(ROOT, "plugins", "python", "tests"))
    os.environ.setdefault("SMB_SMBD", os.path.join(build, "smb-server", "smbd"))
    import fabric as fabric_mod
    import numpy as np
    import smb

    copies = (1, 2, 3)
    with fabric_mod.Fabric(3, "64M") as fab:
        client = smb.Client(fab.server_list, timeout=5.0)
        buffers = {r: client.create(f"cost-r{r}", 3 * STRIPE, stripe_unit=STRIPE, replicas=r) for r in copies}
        one = np.ones(1)
        ops = {}
        for r, b in buffers.items():
            b.write(0, np.zeros(3 * STRIPE // 8))
            ops[(r, "fetch-add")] = lambda b=b: b.fetch_add(0, 1)
            ops[(r, "accumulate")] = lambda b=b: b.apply("accumulate", offset=0, x=one)
        for op in ops.values():
            per_op(op, max(1, args.iters // 10))  # warm: connections made, pages touched
        times = {k: [] for k in ops}
        for _ in range(args.rounds):
            for k, op in ops.items():
                times[k].append(per_op(op, args.iters))
    med = {k: statistics.median(v) for k, v in times.items()}
    transport = f"UCX_TLS={args.ucx_tls}" if args.ucx_tls else "UCX, shared memory"
    print(f"{transport}: median of {args.rounds} rounds of {args.iters} ops, one client, 3 smbd\n")
    print("| op | 1 copy | 2 copies | 3 copies | 2 / 1 | 3 / 1 | 3rd copy adds |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in ("fetch-add", "accumulate"):
        t = [med[(r, name)] * 1e6 for r in copies]
        print(f"| {name} | {t[0]:.1f} us | {t[1]:.1f} us | {t[2]:.1f} us | {t[1] / t[0]:.2f}x | {t[2] / t[0]:.2f}x "
              f"| {t[2] - t[1]:.1f} us ({t[2] / t[1]:.2f}x two) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
