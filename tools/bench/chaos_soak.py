#!/usr/bin/python3
"""A chaos soak with a history check (issue 36, item 6): concurrent client
processes run fetch-adds, compare-swaps, accumulates, writes and reads on a
buffer with 2 copies over 3 smbd, while random servers are SIGKILLed,
then restarted on their address or (every --replace-every'th loss)
replaced by a new smbd at a new address, and repaired. Every operation's invocation,
completion and result is recorded; at the end the history is checked:

  counters   fetch_add on a worker's own word: the returned old values are
             distinct and grow in real time (an op that completed before
             another began returned less), and the final value lies
             between the acknowledged count and that plus the failed ones
  sums       accumulate 1.0 on a worker's own f64: the same bounds
  swap       compare_swap of one shared word from the value a worker last
             saw to a unique tag: no two winners from the same value, and
             the winners form one chain from 0 to the final value (or to a
             swap whose answer was lost)
  registers  each worker writes unique, growing tags into its own slot;
             every worker reads every slot: a read returns 0 or a tag its
             owner wrote, never one older than a write acknowledged before
             the read began, nor than a read that completed before it began
  lock       workers take one lock (kept by its home and the next server,
             both killed in turn), note when it was granted and when they
             let it go, and unlock: no two acknowledged holds overlap

    tools/bench/chaos_soak.py [--build build/ci] [--seconds 60] [--workers 3] [--kill-every 6]
                              [--replace-every 3] [--seed N]

Prints the figures (operations, kills, repairs, violations, the longest
stall a worker saw) and exits 1 on any violation; CTest runs a short one
(reliability.chaos_soak). docs/reliability.md has the long runs.
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

STRIPE = 4096
SERVERS = 3
# One region per stripe, so that the regions lie on different servers.
COUNTERS, SUMS, SWAP, SLOTS = 0, STRIPE, 2 * STRIPE, 3 * STRIPE
SIZE = 6 * STRIPE
NAME = "chaos-soak"
LOCK = "chaos-soak-lock"


# ------------------------------------------------------------------ worker

def worker(index, servers, deadline, out_path, seed):
    """One client process: random ops until the deadline, each recorded."""
    import smb
    rng = random.Random(seed * 1000 + index)
    history = open(out_path, "w")
    client = buf = None
    seen_swap = 0   # the swap word's value this worker last learned
    tag = 0         # this worker's last written tag (index << 40 | n)
    workers = int(os.environ["CHAOS_WORKERS"])

    def record(**entry):
        history.write(json.dumps(entry) + "\n")

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while time.time() < deadline and not stop:
        if buf is None:
            try:
                client = smb.Client(servers, timeout=5.0)
                buf = client.open(NAME)
            except smb.Error as e:
                record(op="open", ok=False, error=str(e)[:200], t0=time.time(), t1=time.time())
                time.sleep(0.1)
                continue
        op = rng.choice(("fetch_add", "accumulate", "swap", "write", "read", "read", "lock"))
        t0 = time.time()
        entry = {"op": op}
        try:
            if op == "fetch_add":
                entry["old"] = buf.fetch_add(COUNTERS + 8 * index, 1)
            elif op == "accumulate":
                buf.apply("accumulate", "f64", SUMS + 8 * index, x=struct_f64(1.0))
            elif op == "swap":
                desired = (index << 40) | (1 << 39) | rng.getrandbits(38)
                entry.update(expected=seen_swap, desired=desired)
                old = buf.compare_swap(SWAP, seen_swap, desired)
                entry["old"] = old
                seen_swap = desired if old == seen_swap else old
            elif op == "lock":
                held = client.lock(LOCK, lease=10.0, timeout=5.0)
                entry["held"] = time.time()
                time.sleep(rng.uniform(0, 0.002))
                entry["let_go"] = time.time()
                held.unlock()  # raises where the lease ran out: the hold was not exclusive
            elif op == "write":
                tag += 1
                entry["tag"] = (index << 40) | tag
                buf.write(SLOTS + 8 * index, struct_u64(entry["tag"]))
            else:
                slot = rng.randrange(workers)
                entry["slot"] = slot
                entry["value"] = int.from_bytes(bytes(buf.read(SLOTS + 8 * slot, size=8)), "little")
            entry["ok"] = True
        except smb.Error as e:
            entry.update(ok=False, error=f"{type(e).__name__}: {str(e)[:200]}")
            buf = None  # a failed op: open again with a new client, as a recovering worker would
        entry.update(t0=t0, t1=time.time())
        record(**entry)
    history.close()


def struct_f64(value):
    import struct
    return struct.pack("<d", value)


def struct_u64(value):
    import struct
    return struct.pack("<Q", value)


# ------------------------------------------------------------------ check

def load(paths):
    return {w: [json.loads(line) for line in open(p) if line.strip()] for w, p in paths.items()}


def floors(done, starts):
    """For each start time in `starts` (sorted), the largest value among
    `done` (pairs of completion time and value) completed before it."""
    done = sorted(done)
    out, best, i = [], -1, 0
    for t in starts:
        while i < len(done) and done[i][0] < t:
            best = max(best, done[i][1])
            i += 1
        out.append(best)
    return out


def check(histories, final_counters, final_sums, final_swap, final_slots):
    """The violations found (an empty list: the history is consistent)."""
    bad = []
    for w, ops in histories.items():
        adds = [o for o in ops if o["op"] == "fetch_add"]
        acked = sorted((o for o in adds if o["ok"]), key=lambda o: o["t0"])
        failed = len(adds) - len(acked)
        olds = [o["old"] for o in acked]
        if len(set(olds)) != len(olds):
            bad.append(f"worker {w}: fetch_add returned the same old value twice")
        for o, floor in zip(acked, floors([(o["t1"], o["old"]) for o in acked], [o["t0"] for o in acked])):
            if o["old"] <= floor:
                bad.append(f"worker {w}: fetch_add at {o['t0']:.3f} returned {o['old']}, not more than {floor} "
                           "returned by one that completed before it began")
                break
        if not len(acked) <= final_counters[w] <= len(adds):
            bad.append(f"worker {w}: counter {final_counters[w]} outside [{len(acked)}, {len(acked) + failed}] "
                       "(acknowledged fetch_adds lost or invented)")
        sums = [o for o in ops if o["op"] == "accumulate"]
        ok = sum(1 for o in sums if o["ok"])
        if not ok <= final_sums[w] <= len(sums):
            bad.append(f"worker {w}: sum {final_sums[w]} outside [{ok}, {len(sums)}] (acknowledged accumulates lost)")
    # The swap word: winners unique per expected value, one chain from 0
    # (a swap whose answer was lost may be a link of it).
    swaps = [o for ops in histories.values() for o in ops if o["op"] == "swap"]
    winners = {}
    for o in swaps:
        if o["ok"] and o["old"] == o["expected"]:
            if o["expected"] in winners:
                bad.append(f"compare_swap: two winners from {o['expected']:#x}")
            winners[o["expected"]] = o["desired"]
    lost_answers = {}
    for o in swaps:
        if not o["ok"]:
            lost_answers.setdefault(o["expected"], []).append(o["desired"])
    value, steps, walked = 0, 0, 0
    while walked <= len(swaps):
        walked += 1
        if value in winners:
            value, steps = winners[value], steps + 1
            continue
        maybe = [d for d in lost_answers.get(value, []) if d in winners or d == final_swap]
        if not maybe:
            break
        value = maybe[0]
    if steps != len(winners):
        bad.append(f"compare_swap: the {len(winners)} winners do not form one chain from 0 ({steps} do)")
    if final_swap != value:
        bad.append(f"compare_swap: final value {final_swap:#x} is not the chain's end {value:#x}")
    # The lock: acknowledged holds, by when they were granted, never overlap.
    holds = sorted(((o["held"], o["let_go"], w) for w, ops in histories.items() for o in ops
                    if o["op"] == "lock" and o["ok"]))
    latest = None  # the hold that lets go last among those granted so far
    for held, let_go, w in holds:
        if latest is not None and held < latest[1]:
            bad.append(f"lock: worker {w} was granted it at {held:.4f} while worker {latest[2]} held it "
                       f"(until {latest[1]:.4f})")
        if latest is None or let_go > latest[1]:
            latest = (held, let_go, w)
    # Registers: one writer per slot, tags growing.
    reads_of = {w: [] for w in histories}
    for ops in histories.values():
        for o in ops:
            if o["op"] == "read" and o["ok"]:
                reads_of[o["slot"]].append(o)
    for w, ops in histories.items():
        writes = [o for o in ops if o["op"] == "write"]
        written = {o["tag"] for o in writes}
        acked_writes = [(o["t1"], o["tag"]) for o in writes if o["ok"]]
        reads = sorted(reads_of[w], key=lambda o: o["t0"])
        starts = [r["t0"] for r in reads]
        by_writes = floors(acked_writes, starts)
        by_reads = floors([(r["t1"], r["value"]) for r in reads], starts)
        for r, f1, f2 in zip(reads, by_writes, by_reads):
            if r["value"] != 0 and r["value"] not in written:
                bad.append(f"slot {w}: a read returned {r['value']:#x}, which its owner never wrote")
            elif r["value"] < max(f1, f2):
                bad.append(f"slot {w}: a read at {r['t0']:.3f} returned {r['value']:#x}, older than "
                           f"{max(f1, f2):#x} (acknowledged before it began)")
        if final_slots[w] != 0 and final_slots[w] not in written:
            bad.append(f"slot {w}: final value {final_slots[w]:#x} never written")
        last = max([tag for _, tag in acked_writes] + [0])
        if final_slots[w] < last:
            bad.append(f"slot {w}: final value {final_slots[w]:#x} older than the last acknowledged write {last:#x}")
    return bad


def self_test():
    """The checker finds what it must (a check that cannot fail is no check):
    a clean history passes, and each kind of violation is reported."""
    def op(kind, t0, t1, ok=True, **kw):
        return dict(op=kind, t0=t0, t1=t1, ok=ok, **kw)
    clean = {0: [op("fetch_add", 0, 1, old=0), op("fetch_add", 2, 3, old=1), op("accumulate", 4, 5),
                 op("swap", 6, 7, expected=0, desired=5, old=0), op("write", 8, 9, tag=7)],
             1: [op("swap", 6.5, 7.5, expected=0, desired=6, old=5), op("read", 10, 11, slot=0, value=7),
                 op("swap", 12, 13, ok=False, expected=5, desired=9)]}
    finals = ([2, 0], [1.0, 0.0], 9, [7, 0])
    cases = {
        "clean": (clean, finals, 0),
        "a lost fetch_add": (clean, ([1, 0], *finals[1:]), 1),
        "a lost accumulate": (clean, (finals[0], [0.0, 0.0], *finals[2:]), 1),
        "a stale fetch_add": ({0: [op("fetch_add", 0, 1, old=1), op("fetch_add", 2, 3, old=0)]},
                              ([2], [0.0], 0, [0]), 1),
        "two swap winners": ({0: [op("swap", 0, 1, expected=0, desired=5, old=0)],
                              1: [op("swap", 0, 1, expected=0, desired=6, old=0)]}, ([0, 0], [0.0, 0.0], 6, [0, 0]), 1),
        "a stale read": ({0: [op("write", 0, 1, tag=7), op("write", 2, 3, tag=8)],
                          1: [op("read", 4, 5, slot=0, value=7)]}, ([0, 0], [0.0, 0.0], 0, [8, 0]), 1),
        "a read of nothing written": ({0: [op("write", 0, 1, tag=7)], 1: [op("read", 4, 5, slot=0, value=3)]},
                                      ([0, 0], [0.0, 0.0], 0, [7, 0]), 1),
        "two lock holders": ({0: [op("lock", 0, 3, held=1, let_go=2)], 1: [op("lock", 0, 4, held=1.5, let_go=3)]},
                             ([0, 0], [0.0, 0.0], 0, [0, 0]), 1),
        "lock holders in turn": ({0: [op("lock", 0, 3, held=1, let_go=2)], 1: [op("lock", 0, 4, held=2.5, let_go=3)]},
                                 ([0, 0], [0.0, 0.0], 0, [0, 0]), 0),
    }
    failed = []
    for name, (histories, final, expected) in cases.items():
        found = check(histories, *final)
        if (len(found) > 0) != (expected > 0):
            failed.append(f"{name}: {found or 'no violation found'}")
    for f in failed:
        print(f"checker self-test FAILED: {f}")
    print(f"checker self-test: {len(cases) - len(failed)} of {len(cases)} cases as expected")
    return 1 if failed else 0


def longest_stall(ops):
    done = sorted(o["t1"] for o in ops if o["ok"])
    return max((b - a for a, b in zip(done, done[1:])), default=0.0)


# ------------------------------------------------------------------ controller

def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build", "ci"))
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--kill-every", type=float, default=6.0, help="seconds between losses")
    p.add_argument("--replace-every", type=int, default=3,
                   help="every Nth loss is a replacement at a new address (Client.replace_server); 0: never")
    p.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    p.add_argument("--self-test", action="store_true", help="check the history checker on made-up histories")
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    p.add_argument("--servers", help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker is not None:
        return worker(args.worker, args.servers, args.deadline, args.out, args.seed)
    if args.self_test:
        return self_test()

    build = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(build, "python"))
    sys.path.insert(0, os.path.join(ROOT, "plugins", "python", "tests"))
    os.environ.setdefault("SMB_SMBD", os.path.join(build, "smb-server", "smbd"))
    import fabric as fabric_mod
    import smb

    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="chaos-soak-")
    with fabric_mod.Fabric(SERVERS, "64M") as fab:
        client = smb.Client(fab.server_list, timeout=5.0)
        buf = client.create(NAME, SIZE, stripe_unit=STRIPE, replicas=2)
        buf.write(0, bytes(SIZE))
        deadline = time.time() + args.seconds
        env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"), CHAOS_WORKERS=str(args.workers))
        paths = {w: os.path.join(work, f"worker{w}.jsonl") for w in range(args.workers)}
        logs = [open(os.path.join(work, f"worker{w}.log"), "w") for w in range(args.workers)]
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(w), "--servers", fab.server_list,
                                   "--deadline", str(deadline), "--out", paths[w], "--seed", str(args.seed)],
                                  env=env, stderr=logs[w]) for w in range(args.workers)]
        kills = repairs = replacements = 0
        repair_errors = []
        serving = list(range(SERVERS))  # per server (slot), the process of the fabric serving it now
        next_kill = time.time() + args.kill_every
        while time.time() < deadline - 1.0:
            if time.time() >= next_kill:
                victim = rng.randrange(SERVERS)
                fab.kill(serving[victim])
                kills += 1
                time.sleep(rng.uniform(0.2, 1.0))  # the clients run degraded meanwhile
                if serving[victim] != victim or (args.replace_every and kills % args.replace_every == 0):
                    # A new machine at a new address takes its place (a slot
                    # served by a replacement is replaced again when lost).
                    spare = fab.start_spare()
                    try:
                        client.replace_server(fab.servers[victim], spare)
                        serving[victim] = len(fab.procs) - 1
                        replacements += 1
                    except smb.Error as e:
                        repair_errors.append(f"replace_server: {type(e).__name__}: {e}")
                else:
                    fab.restart(victim)
                for _ in range(50):
                    try:
                        client.repair(NAME)
                        repairs += 1
                        break
                    except smb.Busy as e:
                        time.sleep(0.1)
                        last = e
                    except smb.Error as e:
                        repair_errors.append(f"{type(e).__name__}: {e}")
                        break
                else:
                    repair_errors.append(f"still busy after 50 tries: {last}")
                next_kill = time.time() + args.kill_every
            time.sleep(0.05)
        crashed = []
        for w, (proc, log) in enumerate(zip(procs, logs)):
            proc.wait(timeout=60)
            log.close()
            if proc.returncode != 0:
                with open(log.name) as f:
                    crashed.append(f"worker {w} exited with {proc.returncode}:\n{f.read()[-3000:]}")
        final = client.open(NAME)
        raw = bytes(final.read(0, size=SIZE))
        counters = [int.from_bytes(raw[COUNTERS + 8 * w:COUNTERS + 8 * w + 8], "little") for w in range(args.workers)]
        import struct
        sums = [struct.unpack_from("<d", raw, SUMS + 8 * w)[0] for w in range(args.workers)]
        swap = int.from_bytes(raw[SWAP:SWAP + 8], "little")
        slots = [int.from_bytes(raw[SLOTS + 8 * w:SLOTS + 8 * w + 8], "little") for w in range(args.workers)]
    histories = load(paths)
    shutil.rmtree(work, ignore_errors=True)
    violations = check(histories, counters, sums, swap, slots)
    ops = sum(len(h) for h in histories.values())
    acked = sum(1 for h in histories.values() for o in h if o.get("ok"))
    failed = ops - acked
    locks = sum(1 for h in histories.values() for o in h if o["op"] == "lock" and o.get("ok"))
    stall = max(longest_stall(h) for h in histories.values())
    print(f"chaos soak (seed {args.seed}): {args.seconds:g} s, {args.workers} workers, {SERVERS} smbd, 2 copies: "
          f"{ops} ops ({acked} acknowledged, {failed} failed; {locks} lock holds), {kills} kills ({replacements} replaced at a new "
          f"address), {repairs} repairs, "
          f"{len(violations)} violations, longest stall {stall * 1000:.0f} ms")
    for e in repair_errors:
        print(f"  repair: {e}")
    for c in crashed:
        print(f"  {c}")
    for v in violations[:20]:
        print(f"  VIOLATION: {v}")
    failures = [o["error"] for h in histories.values() for o in h if not o.get("ok")]
    for e in sorted(set(failures))[:5]:
        print(f"  failed op: {e}")
    return 1 if violations or repair_errors or crashed else 0


if __name__ == "__main__":
    sys.exit(main())
