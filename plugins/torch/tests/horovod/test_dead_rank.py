#!/usr/bin/env python3
"""A rank dies abruptly in the middle of a job: the others get an exception
(HorovodInternalError), not a hang, within seconds.

    smbrun -np 3 -- /usr/bin/python3 test_dead_rank.py

The last rank leaves with os._exit(0) while the others already wait for it
in a collective (exit status 0, so that the launcher does not stop the job
itself: the fabric must notice). Every surviving rank then checks that the
collective in flight and every later kind of collective raise within
DEAD_RANK_LIMIT seconds (default 30; the fabric checks liveness every 2 s).
The survivors leave with os._exit as well: shutdown() would wait for the
dead rank at its closing barrier. Exit status 0: every check passed.
"""

import faulthandler
import os
import sys
import time

os.environ.setdefault("SMB_TORCH_OP_TIMEOUT", "60")

import torch  # noqa: E402

import smb.torch as hvd  # noqa: E402

LIMIT = float(os.environ.get("DEAD_RANK_LIMIT", "30"))


def main():
    faulthandler.dump_traceback_later(180, exit=True)  # a hang fails the test
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    if size < 2:
        print("test_dead_rank: needs at least 2 ranks", file=sys.stderr)
        return 1
    victim = size - 1
    out = hvd.allreduce(torch.ones(4), name="warmup", op=hvd.Sum)
    assert torch.equal(out, torch.full((4,), float(size))), out
    hvd.barrier()
    if rank == victim:
        time.sleep(1.0)  # the others are waiting in "in_flight" by now
        sys.stdout.flush()
        os._exit(0)  # abruptly: no shutdown, no goodbye

    checks = [
        ("allreduce in flight when the rank died",
         lambda: hvd.allreduce(torch.ones(4), name="in_flight", op=hvd.Sum)),
        ("allgather after", lambda: hvd.allgather(torch.ones(1, 2), name="after")),
        ("broadcast from the dead root", lambda: hvd.broadcast(torch.ones(2), victim, name="from_dead")),
        ("async allreduce", lambda: hvd.synchronize(hvd.allreduce_async(torch.ones(2), name="async_after"))),
        ("unnamed allreduce", lambda: hvd.allreduce(torch.ones(2))),
        ("grouped allreduce", lambda: hvd.grouped_allreduce([torch.ones(2), torch.ones(3)], name="grouped")),
        ("alltoall", lambda: hvd.alltoall(torch.ones(size), name="a2a")),
        ("reducescatter", lambda: hvd.reducescatter(torch.ones(size), name="rs")),
        ("barrier", lambda: hvd.barrier()),
        ("join", lambda: hvd.join()),
    ]
    failures = 0
    for what, call in checks:
        started = time.monotonic()
        try:
            call()
        except hvd.HorovodInternalError as e:
            took = time.monotonic() - started
            verdict = "ok" if took <= LIMIT else f"too slow (limit {LIMIT:.0f} s)"
            failures += took > LIMIT
            print(f"[rank {rank}] {what}: {type(e).__name__} after {took:.1f} s ({verdict}): {e}", flush=True)
        except Exception as e:  # noqa: BLE001 - the wrong kind of error is a failure
            failures += 1
            print(f"[rank {rank}] {what}: FAILED: {type(e).__name__} (want HorovodInternalError): {e}", flush=True)
        else:
            failures += 1
            print(f"[rank {rank}] {what}: FAILED: no error", flush=True)
    print(f"[rank {rank}] dead rank: {'OK' if failures == 0 else f'{failures} FAILED'}", flush=True)
    sys.stderr.flush()
    os._exit(0 if failures == 0 else 1)


if __name__ == "__main__":
    sys.exit(main())
