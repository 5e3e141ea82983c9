#!/usr/bin/python3
"""smb.collective's framework-neutral collectives on NumPy arrays (the layer
under smb.tensorflow), run inside every worker of a job (smbrun -np 3):
exact results for every op and dtype, scaling, async handles, gathers,
broadcasts, all-to-all, reduce-scatter with uneven rows, objects, ranks
that come late, process sets, join, and errors that every rank raises before the next collective
works. Exits non-zero on the first failure on any rank."""

import os
import random
import sys
import time
import traceback

import numpy as np

from smb.collective import basics, numpy_ops as hvd, process_sets
from smb.collective.fabric import HorovodInternalError

DTYPES = (np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64)


def per_rank(r, dtype, shape=(5, 3)):
    """Rank r's values: small integers, exact in every dtype and every sum."""
    return (np.arange(np.prod(shape)).reshape(shape) % 7 + r + 1).astype(dtype)


def check_reductions(r, n):
    parts = [per_rank(k, np.int64) for k in range(n)]
    reference = {"sum": sum(parts), "min": np.minimum.reduce(parts), "max": np.maximum.reduce(parts),
                 "product": np.prod(parts, axis=0)}
    for dtype in DTYPES:
        for op, ref in reference.items():
            got = hvd.allreduce(per_rank(r, dtype), op=op, name=f"{op}.{np.dtype(dtype).name}")
            assert got.dtype == dtype, (op, dtype, got.dtype)
            np.testing.assert_array_equal(got, ref.astype(dtype), err_msg=f"{op} {np.dtype(dtype).name}")
    avg = hvd.allreduce(np.full(4, 7 + r, dtype=np.int32), op="average")
    np.testing.assert_array_equal(avg, np.full(4, int((7 * n + n * (n - 1) / 2) / n), np.int32))  # truncated
    scaled = hvd.allreduce(np.ones(3, np.float64), op="sum", prescale_factor=2.0, postscale_factor=0.5)
    np.testing.assert_array_equal(scaled, np.full(3, float(n)))


def check_async(r, n):
    handles = [hvd.allreduce_async(np.full(8, float(k)), op="sum", name=f"async.{k}") for k in range(20)]
    pending_once = any(not hvd.poll(h) for h in handles)
    for k, h in enumerate(reversed(handles)):
        np.testing.assert_array_equal(hvd.synchronize(h), np.full(8, float((19 - k) * n)))
    assert pending_once, "poll() should be False right after submitting"


def check_moves(r, n):
    g = hvd.allgather(np.full((r + 1, 2), r, dtype=np.int16))
    np.testing.assert_array_equal(g[:, 0], np.concatenate([np.full(k + 1, k) for k in range(n)]))
    for root in range(n):
        b = hvd.broadcast(np.full(5, r, dtype=np.float32), root, name=f"b{root}")
        np.testing.assert_array_equal(b, np.full(5, root, dtype=np.float32))
    splits = [k + 1 for k in range(n)]  # rank r sends k+1 rows to rank k
    x = np.repeat(np.arange(n), splits) * 100 + r
    out, received = hvd.alltoall(x, splits=splits)
    assert received == [r + 1] * n, received
    np.testing.assert_array_equal(out, np.concatenate([np.full(r + 1, r * 100 + k) for k in range(n)]))
    rows = 2 * n + 1  # uneven: rank 0 gets one more row
    rs = hvd.reducescatter(np.ones((rows, 2), np.float32), op="sum")
    assert rs.shape == ((3 if r == 0 else 2), 2), rs.shape
    np.testing.assert_array_equal(rs, np.full(rs.shape, float(n)))
    assert hvd.broadcast_object({"from": r}, root_rank=n - 1) == {"from": n - 1}
    assert hvd.allgather_object(r * r) == [k * k for k in range(n)]
    hvd.barrier()


def check_errors(r, n):
    try:
        hvd.allreduce(np.ones(3 + r), name="mismatch")
        raise AssertionError("a shape mismatch must raise")
    except HorovodInternalError as e:
        assert "Mismatched ALLREDUCE tensor shapes" in str(e), e
    np.testing.assert_array_equal(hvd.allreduce(np.ones(3), op="sum", name="mismatch"), np.full(3, float(n)))
    try:
        hvd.allreduce(np.ones(2, np.float32 if r % 2 else np.float64), name="dtypes")
        raise AssertionError("a dtype mismatch must raise")
    except HorovodInternalError as e:
        assert "Mismatched data types" in str(e), e


def check_late_ranks(r, n):
    """Ranks that come late: the others sleep on the arrival board, and the
    late rank's arrival wakes them (fabric.py, ctl). Then arrivals in a
    shuffled order, call after call, every result exact."""
    c = process_sets.group_of(process_sets.global_process_set, "Allreduce").collective("allreduce.late")
    before = dict(c.board.counters)
    if r == n - 1:
        time.sleep(0.3)
    got = hvd.allreduce(np.full(2, float(r)), op="sum", name="late")
    np.testing.assert_array_equal(got, np.full(2, float(sum(range(n)))))
    after = c.board.counters
    if r == n - 1:  # every other rank slept by then: its arrival found them asleep
        assert after["wakeups_sent"] > before["wakeups_sent"], (before, after)
    else:
        assert after["sleeps"] > before["sleeps"], (before, after)
    rng = random.Random(1234)  # the same delays on every rank: each call has its own late rank
    for k in range(60):
        late, pause = rng.randrange(n), rng.choice((0.0, 0.0001, 0.002, 0.02))
        if r == late:
            time.sleep(pause)
        got = hvd.allreduce(np.full(3, float(r + k), np.float32), op="sum", name="shuffled")
        np.testing.assert_array_equal(got, np.full(3, float(sum(range(n)) + n * k), np.float32), err_msg=str(k))


def check_process_sets(r, n):
    os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
    evens = process_sets.add_process_set([k for k in range(n) if k % 2 == 0])
    if r % 2 == 0:
        got = hvd.allreduce(np.ones(2), op="sum", process_set=evens)
        np.testing.assert_array_equal(got, np.full(2, float(len(evens.ranks))))
    else:
        try:
            hvd.allreduce(np.ones(2), process_set=evens)
            raise AssertionError("a non-member must be refused")
        except ValueError:
            pass
    hvd.barrier()
    assert process_sets.remove_process_set(evens)


def check_join(r, n):
    if r == 0:
        last = hvd.join()
    else:
        got = hvd.allreduce(np.full(3, 2.0), op="sum", name="with_joined")
        np.testing.assert_array_equal(got, np.full(3, 2.0 * (n - 1)))  # rank 0 counts as zeros
        last = hvd.join()
    assert last != 0 and len(set(hvd.allgather_object(last))) == 1, last
    np.testing.assert_array_equal(hvd.allreduce(np.ones(1), op="sum", name="with_joined"), np.full(1, float(n)))


def main():
    basics.init()
    r, n = basics.rank(), basics.size()
    for check in (check_reductions, check_async, check_moves, check_errors, check_late_ranks, check_process_sets,
                  check_join):
        try:
            check(r, n)
        except Exception:  # noqa: BLE001 - every failure ends the job at once
            traceback.print_exc()
            print(f"rank {r}: {check.__name__} FAILED", flush=True)
            os._exit(1)
        if r == 0:
            print(f"{check.__name__}: ok", flush=True)
    basics.shutdown()


if __name__ == "__main__":
    sys.exit(main())
