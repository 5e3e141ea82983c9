#!/usr/bin/python3
"""What a lock kept by two servers costs (issue 36, item 1).

One process takes and releases one lock, uncontended, back to back: on a
fabric of one smbd (one keeper, the reference) and of three (two keepers:
the home, then the next server, both asked in turn), in this one script on
the same transport. Prints the time per lock+unlock on each and the ratio.
Rounds alternate between the two fabrics, so that a slow moment of the
machine falls on both.

  /usr/bin/python3 tools/bench/lock_cost.py [--build build/ci] [--iters 2000] [--rounds 5]
"""

import argparse
import os
import statistics
import sys
import time

from bench_common import ROOT, seconds_per_call


def per_cycle(client, name, iters):
    return seconds_per_call(lambda: client.lock(name).unlock(), iters)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build", "ci"))
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    build = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(build, "python"))
    sys.path.insert(0, os.path.join(ROOT, "plugins", "python", "tests"))
    os.environ.setdefault("SMB_SMBD", os.path.join(build, "smb-server", "smbd"))
    import fabric as fabric_mod
    import smb

    with fabric_mod.Fabric(1, "64M") as one, fabric_mod.Fabric(3, "64M") as three:
        clients = {"1 keeper": smb.Client(one.server_list), "2 keepers": smb.Client(three.server_list)}
        time.sleep(2.5)  # past the servers' --lock-grace, as a fabric in use is
        times = {k: [] for k in clients}
        for k, c in clients.items():
            per_cycle(c, "lock-cost", args.iters // 10)  # warm: connections made
        for _ in range(args.rounds):
            for k, c in clients.items():
                times[k].append(per_cycle(c, "lock-cost", args.iters))
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in med.items():
        print(f"{k}: {v * 1e6:.1f} us per lock+unlock (median of {args.rounds} rounds of {args.iters})")
    print(f"two keepers / one: {med['2 keepers'] / med['1 keeper']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
