#!/usr/bin/python3
"""How fast a repair rebuilds the copies a restarted server lost, as a ratio
against reading the same bytes with a client on the same fabric. A
benchmark, not a test (the tests are tests/integration/repair_test.cpp).

Per --repeat: three smbd on loopback, a buffer of --size-mib MiB with two copies;
one server (not the buffer's home) is killed (SIGKILL) and restarted empty,
then Client.repair rebuilds its copies (2/3 of the buffer's size: it held
copy 0 of one third and copy 1 of another). The reference, on the same
fabric just before the kill: one client reading the whole buffer.
Reported (medians): repair MiB/s, read MiB/s, and their ratio. The
restarted server pulls each byte from the other copy's server itself
(pull_copy, 4 MiB reads, 4 in flight), except where the repairing client
maps both servers' memory (one host, UCX shared memory: it copies itself,
faster); with --copy client the bytes always pass through the repairing
client (read from one, written to the other), as where servers cannot
reach each other. The report says which happened.

With --writer, another client keeps the buffer open and writes 1 MiB blocks
round-robin from before the kill until after the repair (an online repair:
docs/reliability.md, "Repair"). Reported besides: the bytes the repair
copied again (written during the copy), how long it paused the writer
(paused_s), and the writer's slowest write during the repair against its
median write before the kill.

Usage: tools/bench/repair_throughput.py [--preset ci | --build DIR] [--repeat 3] [--size-mib 256]
                                        [--ucx-tls tcp,self] [--copy servers|client] [--writer] [--json]
"""

import argparse
import json
import os
import statistics
import sys
import threading
import time

from bench_common import ROOT  # noqa: E402
MIB = 1 << 20


class Writer:
    """Writes 1 MiB blocks round-robin into `buf` until stopped, each time with new values (so
    that the repair has to copy them again), timing each write; `data` follows what it wrote."""

    def __init__(self, buf, data):
        self.buf, self.data, self.times = buf, data, []
        self.stop = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        words = MIB // 4
        blocks = len(self.data) // words
        k = 0
        try:
            while not self.stop.is_set():
                block = self.data[(k % blocks) * words:(k % blocks + 1) * words] + 1
                start = time.perf_counter()
                self.buf.write((k % blocks) * MIB, block)
                self.times.append((start, time.perf_counter() - start))
                self.data[(k % blocks) * words:(k % blocks + 1) * words] = block
                k += 1
        except Exception as e:  # noqa: BLE001  (reported by the caller)
            self.error = e

    def finish(self):
        self.stop.set()
        self.thread.join()
        if self.error:
            raise SystemExit(f"repair_throughput: the writer failed: {self.error}")


def run_once(fabric_mod, smb, np, size, writer):
    with fabric_mod.Fabric(3, f"{2 * size // MIB + 64}M") as fab:
        client = smb.Client(servers=fab.server_list, timeout=30.0)
        data = np.arange(size // 4, dtype=np.uint32)
        buf = client.create("repaired", size, replicas=2)
        buf.write(0, data)
        out = np.zeros_like(data)
        buf.read(0, out)  # the reference is a warm read: its pages touched, the path set up
        start = time.perf_counter()
        buf.read(0, out)
        read_s = time.perf_counter() - start
        writing = Writer(buf, data) if writer else None
        if not writer:
            buf.close()
            client = None
        time.sleep(0.5)
        killed_at = time.perf_counter()
        fab.restart(1)
        repairer = smb.Client(servers=fab.server_list, timeout=30.0)
        try:
            repair_at = time.perf_counter()
            report = repairer.repair("repaired")
            repaired_at = time.perf_counter()
        except smb.NotFound:
            if writing:
                writing.finish()
            return None  # homed on the restarted server: its layout went with it; ports differ next time
        result = {"read_mib_s": size / MIB / read_s, "repair_mib_s": report.bytes / MIB / report.seconds,
                  "server_to_server": all(c.server_to_server for c in report.repaired),
                  "repaired_bytes": report.bytes - report.recopied, "recopied_bytes": report.recopied,
                  "repair_s": report.seconds, "paused_s": report.paused_seconds}
        if writing:
            time.sleep(0.2)
            writing.finish()
            before = [t for at, t in writing.times if at < killed_at]
            during = [t for at, t in writing.times if repair_at <= at + t and at <= repaired_at]
            result["write_median_s"] = statistics.median(before)
            result["write_slowest_during_repair_s"] = max(during) if during else 0.0
            result["writes_during_repair"] = len(during)
        check = np.empty_like(data)
        repairer.open("repaired").read(0, check)
        if not (check == data).all():
            raise SystemExit("repair_throughput: the repaired buffer does not read back as written")
        return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="ci")
    ap.add_argument("--build")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--ucx-tls")
    ap.add_argument("--copy", choices=("servers", "client"), default="servers",
                    help="who moves the bytes: the restarted server (pull_copy) or the repairing client")
    ap.add_argument("--writer", action="store_true", help="a client writes through the repair")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    build = args.build or os.path.join(ROOT, "build", args.preset)
    os.environ.setdefault("SMB_SMBD", os.path.join(build, "smb-server", "smbd"))
    if args.ucx_tls:
        os.environ["UCX_TLS"] = args.ucx_tls
    os.environ["SMB_REPAIR_COPY"] = args.copy
    sys.path.insert(0, os.path.join(build, "python"))
    sys.path.insert(0, os.path.join(ROOT, "plugins", "python", "tests"))
    import fabric as fabric_mod  # noqa: E402  (the tests' smbd launcher)
    import numpy as np  # noqa: E402
    import smb  # noqa: E402

    size = args.size_mib * MIB
    runs = []
    while len(runs) < args.repeat:
        run = run_once(fabric_mod, smb, np, size, args.writer)
        if run is not None:
            runs.append(run)
    result = {
        "size": size,
        "transport": args.ucx_tls or "shared memory (UCX default)",
        "copy": "server to server" if all(r["server_to_server"] for r in runs) else "through the client",
        "repaired_bytes": runs[0]["repaired_bytes"],
        "repair_mib_s": statistics.median(r["repair_mib_s"] for r in runs),
        "read_mib_s": statistics.median(r["read_mib_s"] for r in runs),
    }
    result["ratio"] = result["repair_mib_s"] / result["read_mib_s"]
    for key in ("recopied_bytes", "paused_s", "write_median_s", "write_slowest_during_repair_s",
                "writes_during_repair"):
        if key in runs[0]:
            result[key] = statistics.median(r[key] for r in runs)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['transport']}, {result['copy']}: repair {result['repair_mib_s']:.0f} MiB/s "
              f"({result['repaired_bytes'] // MIB} MiB rebuilt), client read {result['read_mib_s']:.0f} MiB/s, "
              f"ratio {result['ratio']:.2f} (median of {len(runs)})")
        if args.writer:
            print(f"  with a writer: {result['recopied_bytes'] / MIB:.0f} MiB recopied, writer paused "
                  f"{result['paused_s'] * 1000:.0f} ms; its slowest write during the repair "
                  f"{result['write_slowest_during_repair_s'] * 1000:.1f} ms against a median of "
                  f"{result['write_median_s'] * 1000:.2f} ms before ({result['writes_during_repair']:.0f} writes)")


if __name__ == "__main__":
    main()
