#!/usr/bin/env python3
"""smb.torch's Horovod API, call by call, run inside every worker of a job:

    smbrun -np 4 --local-servers 2 -- /usr/bin/python3 test_api.py [-v] [-k PATTERN]

Every rank runs the same tests in the same order, and each test runs its
collectives among all of them (or among process sets). Expected values are
computed on each rank from seeded generators (every rank can make every
rank's input), so a test needs no communication beyond the calls it tests.

Bounded and fail-fast: every test runs under a watchdog (faulthandler, at
most SMB_TORCH_TEST_LIMIT seconds, default 90: it dumps every thread's stack
and exits 1), and the first failing test on any rank prints its traceback
and ends that process with exit status 1 at once, so the launcher stops the
job and reports it (the other ranks would otherwise wait for collectives
that the failing rank never submits). Exit status 0: every test passed on
this rank.

Unnamed collectives are matched by a per-process counter, so every test
keeps the number of collective calls equal on every rank (tests where some
ranks sit out calls, such as join, rotate who sits out).
"""

import copy
import faulthandler
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import unittest
import warnings
import zlib

# Before smb.torch reads them (at init): process sets may be added later, the
# timeline may be started by the API, and a data phase waits at most a minute.
os.environ.setdefault("HOROVOD_DYNAMIC_PROCESS_SETS", "1")
os.environ.setdefault("HOROVOD_TIMELINE", "DYNAMIC")
os.environ.setdefault("SMB_TORCH_OP_TIMEOUT", "60")

import torch  # noqa: E402

import smb.torch as hvd  # noqa: E402

TEST_LIMIT = float(os.environ.get("SMB_TORCH_TEST_LIMIT", "90"))
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
DTYPES = INTS + FLOATS
REDUCE_OPS = [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product]
OP_NAMES = {hvd.Sum: "sum", hvd.Average: "average", hvd.Min: "min", hvd.Max: "max", hvd.Product: "product"}


# ---------------------------------------------------------------- helpers


def gen(*key):
    """A generator seeded from `key`: the same stream on every rank."""
    g = torch.Generator()
    g.manual_seed(zlib.crc32(repr(key).encode()))
    return g


def dname(dtype):
    return str(dtype).replace("torch.", "")


def all_ranks(shape, dtype, *key, lo=-10, hi=10):
    """Every rank's input for `key`, stacked along a new first dimension
    (small integers, so that sums and products are exact in every dtype)."""
    if dtype == torch.uint8:
        lo = max(lo, 0)
    return torch.randint(lo, hi, (hvd.size(),) + tuple(shape), generator=gen(*key)).to(dtype)


def scaled(t, factor):
    """t * factor as Horovod scales: in double for integers (truncated toward
    zero) and float64, in float for float32 and the 16-bit types."""
    if factor == 1.0:
        return t
    if t.is_floating_point():
        wide = t.double() if t.dtype == torch.float64 else t.float()
        return (wide * factor).to(t.dtype)
    return (t.double() * factor).trunc().to(t.dtype)


def reference(data, op, pre=1.0, post=1.0, divisor=None):
    """The reduction of data[0], data[1], ... (one per rank) as Horovod defines
    it: each input prescaled, reduced, postscaled (Average: post / set size),
    integers truncated toward zero."""
    x = scaled(data, pre).double()
    if op in (hvd.Sum, hvd.Average):
        r = x.sum(0)
    elif op == hvd.Min:
        r = x.amin(0)
    elif op == hvd.Max:
        r = x.amax(0)
    else:
        r = x.prod(0)
    r = r.to(data.dtype)
    return scaled(r, post / (divisor or data.shape[0]) if op == hvd.Average else post)


def split_rows(n, size, index):
    """Horovod's reducescatter split: (first row, rows) of set rank `index`."""
    q, r = divmod(n, size)
    return index * q + min(index, r), q + (1 if index < r else 0)


def model_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def make_model(*key):
    """A small float64 MLP with weights drawn from `key`."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 2)).double()
    g = gen("model", *key)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    return model


def batch(rank, step, k=0, rows=3):
    g = gen("batch", rank, step, k)
    return torch.randn(rows, 4, generator=g, dtype=torch.float64), torch.randn(rows, 2, generator=g,
                                                                                dtype=torch.float64)


def loss_of(model, x, y):
    return ((model(x) - y) ** 2).mean()


def reference_training(model, make_opt, steps, passes=1, op=hvd.Average, ranks=None):
    """A single process doing what DistributedOptimizer promises: each step,
    the gradient of every rank's `passes` batches (summed locally), averaged
    (or summed) over the ranks, then one step of the optimizer."""
    model = copy.deepcopy(model)
    opt = make_opt(model.parameters())
    ranks = list(range(hvd.size())) if ranks is None else ranks
    for step in range(steps):
        total = [torch.zeros_like(p) for p in model.parameters()]
        for r in ranks:
            model.zero_grad()
            for k in range(passes):
                loss_of(model, *batch(r, step, k)).backward()
            for acc, p in zip(total, model.parameters()):
                if p.requires_grad:
                    acc += p.grad
        for acc, p in zip(total, model.parameters()):
            if p.requires_grad:
                p.grad = acc / len(ranks) if op == hvd.Average else acc
        opt.step()
    return model


class Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


class Case(unittest.TestCase):
    """Every test: init (idempotent), a watchdog, helpers over all ranks."""

    def setUp(self):
        hvd.init()
        faulthandler.dump_traceback_later(TEST_LIMIT, exit=True)

    def tearDown(self):
        faulthandler.cancel_dump_traceback_later()

    @property
    def rank(self):
        return hvd.rank()

    @property
    def size(self):
        return hvd.size()

    def assertSameTensor(self, actual, expected, msg=None):
        """Same dtype and shape; integers exactly equal, floats close."""
        self.assertEqual(actual.dtype, expected.dtype, msg)
        self.assertEqual(tuple(actual.shape), tuple(expected.shape), msg)
        if expected.is_floating_point():
            torch.testing.assert_close(actual, expected, msg=msg)
        else:
            self.assertTrue(torch.equal(actual, expected), f"{msg}: {actual} != {expected}")

    def assertEverywhere(self, value, name):
        """`value` is equal on every rank; returns every rank's."""
        values = hvd.allgather_object(value, name=name)
        for r, v in enumerate(values):
            self.assertEqual(v, values[0], f"{name}: rank {r} has {v!r}, rank 0 {values[0]!r}")
        return values

    def raisesEverywhere(self, exc, fn, *args, **kwargs):
        """fn raises `exc` on this rank, and something on every other rank
        (checked with a collective); returns this rank's message."""
        message = None
        try:
            fn(*args, **kwargs)
        except exc as e:
            message = f"{type(e).__name__}: {e}"
        raised = hvd.allgather_object(message is not None, name="raised")
        self.assertTrue(raised[self.rank], f"{getattr(fn, '__name__', fn)} did not raise {exc.__name__}")
        self.assertTrue(all(raised), f"not every rank raised: {raised}")
        return message

    def assertCollectivesWork(self, tag):
        """The next collective after an error works on every rank."""
        out = hvd.allreduce(torch.ones(3), name=f"works.{tag}", op=hvd.Sum)
        self.assertTrue(torch.equal(out, torch.full((3,), float(self.size))))


# ---------------------------------------------------------------- basics


class T01Basics(Case):
    def test_topology_matches_launcher(self):
        env = os.environ
        if "OMPI_COMM_WORLD_RANK" in env:
            expected = [int(env[v]) for v in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                               "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")]
        else:
            expected = [int(env[v]) for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")]
        actual = [hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size()]
        self.assertEqual(actual, expected)
        for value in actual + [hvd.cross_rank(), hvd.cross_size()]:
            self.assertIs(type(value), int)
        # One host: one node, every worker local.
        self.assertEqual(hvd.cross_size(), hvd.size() // hvd.local_size())
        self.assertEqual(hvd.cross_rank(), int(env.get("GROUP_RANK", "0")))
        self.assertTrue(hvd.is_initialized())
        self.assertTrue(hvd.is_homogeneous())
        ranks = self.assertEverywhere(None, "topology.none")
        self.assertEqual(len(ranks), hvd.size())
        self.assertEqual(hvd.allgather_object(hvd.rank(), name="topology.ranks"), list(range(hvd.size())))

    def test_build_queries(self):
        # Collectives go through the fabric: no MPI, gloo, NCCL, DDL, oneCCL or ROCm.
        for query in (hvd.mpi_built, hvd.mpi_enabled, hvd.gloo_built, hvd.gloo_enabled, hvd.ddl_built,
                      hvd.ccl_built, hvd.rocm_built, hvd.mpi_threads_supported):
            self.assertIs(query(), False, query.__name__)
        self.assertEqual(hvd.nccl_built(), 0)
        self.assertFalse(hvd.nccl_built() and hvd.nccl_built() < 2700)
        self.assertEqual(hvd.cuda_built(), torch.cuda.is_available())
        self.assertEqual((hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product), (0, 1, 2, 3, 4, 5))
        self.assertTrue(issubclass(hvd.HorovodInternalError, RuntimeError))
        for module in ("mpi_ops", "optimizer", "functions", "compression", "sync_batch_norm"):
            self.assertTrue(hasattr(hvd, module), module)


# ---------------------------------------------------------------- allreduce


class T02Allreduce(Case):
    def test_every_op_dtype_and_dim_async(self):
        """Sum, Average, Min, Max, Product over every dtype and 1-3 dims,
        all submitted before any is synchronized; poll() is False for at
        least one right after its submission; inputs stay unchanged."""
        jobs, pending_seen = [], False
        for op in REDUCE_OPS:
            lo, hi = (-3, 4) if op == hvd.Product else (-10, 10)
            for dtype in DTYPES:
                for dim in (1, 2, 3):
                    data = all_ranks((3,) * dim, dtype, "allreduce", op, dtype, dim, lo=lo, hi=hi)
                    mine = data[self.rank].clone()
                    handle = hvd.allreduce_async(mine, name=f"ar.{OP_NAMES[op]}.{dname(dtype)}.{dim}", op=op)
                    pending_seen |= not hvd.poll(handle)
                    jobs.append((handle, op, data, mine))
        self.assertTrue(pending_seen, "every allreduce was done right after it was submitted")
        for handle, op, data, mine in jobs:
            out = hvd.synchronize(handle)
            what = f"{OP_NAMES[op]} {data.dtype} {tuple(mine.shape)}"
            self.assertSameTensor(out, reference(data, op), what)
            self.assertTrue(torch.equal(mine, data[self.rank]), what + ": input changed")

    def test_both_paths_at_the_inline_limit(self):
        """A tensor that fits the arrival slot is reduced on each rank, a
        larger one on the servers (smb.collective.fabric, "inline"); both
        give every op and dtype exactly, right at the limit and one element
        past it, and every rank the same bits (float32 noise, not integers)."""
        from smb.collective import fabric
        limit = fabric.inline_capacity(self.size)
        for dtype in DTYPES:
            itemsize = torch.empty(0, dtype=dtype).element_size()
            for n in (limit // itemsize, limit // itemsize + 1):
                for op in REDUCE_OPS:
                    lo, hi = (-1, 2) if op == hvd.Product else (-10, 10)
                    data = all_ranks((n,), dtype, "inline", op, dtype, n, lo=lo, hi=hi)
                    out = hvd.allreduce(data[self.rank], name=f"ar.inline.{dname(dtype)}.{n}", op=op)
                    self.assertSameTensor(out, reference(data, op), f"{OP_NAMES[op]} {dtype} x {n}")
        for n in (limit // 4, limit // 4 + 1):
            noise = torch.randn(hvd.size(), n, generator=gen("inline.noise", n))
            out = hvd.allreduce(noise[self.rank], name=f"ar.inline.noise.{n}", op=hvd.Sum)
            torch.testing.assert_close(out, noise.sum(0))
            self.assertEverywhere(zlib.crc32(out.numpy().tobytes()), f"inline.bits.{n}")
        # Parts travel inline or through part buffers rank by rank: even
        # ranks' parts fit their slots, odd ranks' do not.
        rows = [limit // 8 if r % 2 == 0 else limit // 8 + 1 for r in range(self.size)]
        parts = [torch.arange(rows[r] * 2, dtype=torch.float32).view(-1, 2) + 1000 * r for r in range(self.size)]
        out = hvd.allgather(parts[self.rank], name="ag.inline")
        self.assertTrue(torch.equal(out, torch.cat(parts)))
        for root in range(self.size):
            out = hvd.broadcast(parts[root] if self.rank == root else torch.zeros_like(parts[root]), root,
                                name=f"bc.inline.{rows[root]}")
            self.assertTrue(torch.equal(out, parts[root]), f"root {root}")
        sent = torch.cat([parts[self.rank]] * self.size)
        out, _ = hvd.alltoall(sent, [rows[self.rank]] * self.size, name="a2a.inline")
        self.assertTrue(torch.equal(out, torch.cat(parts)))

    def test_the_synchronous_lane_matches_the_full_path(self):
        """A named small hvd.allreduce of a CPU tensor that needs no gradient
        takes a short lane (ops._allreduce_lane); it must give what the
        full path gives (allreduce_async: handle, thread, views): same
        dtype, shape and bits, every op, dtype and postscale; a tensor that
        needs a gradient still gets one. allreduce_ takes it too, in place.
        A float result is scaled in C++, with the same bits."""
        from smb.collective import process_sets

        def lanes_taken():
            group = process_sets.group_of(hvd.global_process_set, "Allreduce")
            return {signature[0] for signature, lane in group.lanes.items() if lane}

        for dtype in DTYPES:
            for op in REDUCE_OPS:
                for post in (1.0, 0.5):
                    lo, hi = (-2, 3) if op == hvd.Product else (-10, 10)
                    data = all_ranks((2, 3), dtype, "lane", op, dtype, post, lo=lo, hi=hi)
                    what = f"{OP_NAMES[op]} {dname(dtype)} post {post}"
                    lane = hvd.allreduce(data[self.rank], name=f"lane.{what}", op=op, postscale_factor=post)
                    full = hvd.synchronize(hvd.allreduce_async(data[self.rank], name=f"full.{what}", op=op,
                                                               postscale_factor=post))
                    self.assertEqual((lane.dtype, lane.shape), (full.dtype, full.shape), what)
                    self.assertTrue(torch.equal(lane, full), f"{what}: {lane} against {full}")
                    # In place (allreduce_) takes the lane too, into the tensor itself.
                    mine = data[self.rank].clone()
                    self.assertIs(hvd.allreduce_(mine, name=f"lane_.{what}", op=op, postscale_factor=post), mine)
                    self.assertTrue(torch.equal(mine, full), f"in place {what}: {mine} against {full}")
                    taken = lanes_taken()
                    self.assertEqual(f"lane_.{what}" in taken, f"lane.{what}" in taken,
                                     f"{what}: allreduce_ takes the lane where allreduce does")
        self.assertIn("lane_.sum float32 post 1.0", lanes_taken())
        # The lane scales a float result in C++ (torch's mul_ costs more
        # than the collective); the full path above scaled it in torch.
        left = {s[0]: lane.inline.factor_left
                for s, lane in process_sets.group_of(hvd.global_process_set, "Allreduce").lanes.items() if lane}
        self.assertEqual(left["lane.average float32 post 0.5"], 1.0)
        self.assertEqual(left["lane.average float64 post 1.0"], 1.0)
        self.assertEqual(left["lane.average int32 post 0.5"], 0.5 / self.size)
        x = torch.ones(3, requires_grad=True)
        hvd.allreduce(x, op=hvd.Sum, name="lane.grad").sum().backward()
        self.assertTrue(torch.equal(x.grad, torch.full((3,), float(self.size))))
        # A rank late past the board's first wait: the others sleep and
        # reduce after it (the lane's slow path), each rank late in turn.
        for late in range(self.size):
            if self.rank == late:
                time.sleep(0.05)
            out = hvd.allreduce(torch.full((2,), float(self.rank + 1)), name="lane.late", op=hvd.Average)
            self.assertTrue(torch.equal(out, torch.full((2,), (self.size + 1) / 2)), f"rank {late} late: {out}")

    def test_reduction_on_the_ranks(self):
        """SMB_TORCH_REDUCTION=ranks: each rank reduces a shard (a
        reduce-scatter and allgather through the fabric) instead of the
        servers; exact for every op, and where ranks disagree on the
        setting they all take the servers' path. "auto" (the default)
        takes the ranks' path exactly where every rank maps the reduction
        buffer, and then reduces each shard in the mapping (C++)."""
        from smb.collective import data as fabric_data
        saved = fabric_data._REDUCTION, fabric_data._reduce_by_ranks, fabric_data._reduce_shard_in_mapping
        by_ranks, in_mapping = saved[1], saved[2]
        used, mapped = [], []
        fabric_data._reduce_by_ranks = lambda *a: used.append(1) or by_ranks(*a)
        fabric_data._reduce_shard_in_mapping = lambda *a: mapped.append(in_mapping(*a)) or mapped[-1]
        try:
            n = fabric_data._BY_RANKS_FROM // 4 + 3 * self.size + 1  # shards of unequal size
            for setting, expected in (("ranks", 15), ("ranks" if self.rank % 2 else "servers", 0), ("auto", None)):
                fabric_data._REDUCTION = setting
                used.clear()
                mapped.clear()
                for dtype in (torch.int32, torch.float32, torch.float64):
                    for op in REDUCE_OPS:
                        lo, hi = (-1, 2) if op == hvd.Product else (-10, 10)
                        data = all_ranks((n,), dtype, "by ranks", op, dtype, lo=lo, hi=hi)
                        out = hvd.allreduce(data[self.rank], name=f"ar.ranks.{dname(dtype)}", op=op)
                        self.assertSameTensor(out, reference(data, op), f"{setting}: {OP_NAMES[op]} {dtype}")
                if expected is None:
                    # auto: these jobs run every rank on one host with UCX's
                    # default transports (shared memory), so every rank maps.
                    if "UCX_TLS" in os.environ:
                        continue  # (another transport may not map: exactness is all there is to check)
                    expected = 15
                    self.assertEqual(mapped, [True] * expected, "auto: each shard reduced in the mapping")
                self.assertEqual(len(used), expected, setting)
        finally:
            fabric_data._REDUCTION, fabric_data._reduce_by_ranks, fabric_data._reduce_shard_in_mapping = saved

    def test_async_in_different_orders(self):
        """Ranks may submit their collectives in different orders (Horovod
        negotiates by name): 130 async allreduces, reversed on odd ranks (so
        that the first 64 of two ranks have no name in common)."""
        names = [f"ar.order.{i}" for i in range(130)]
        if self.rank % 2:
            names.reverse()
        handles = {name: hvd.allreduce_async(torch.full((2,), float(name.split(".")[-1])), name=name, op=hvd.Sum)
                   for name in names}
        for name in sorted(handles):
            out = hvd.synchronize(handles[name])
            self.assertTrue(torch.equal(out, torch.full((2,), float(self.size * int(name.split(".")[-1])))), name)

    def test_integer_average_truncates_toward_zero(self):
        # Sums of -5 (odd) and +5 over ranks: trunc(sum / size), not floor.
        x = torch.tensor([-5 if self.rank == 0 else 0, 5 if self.rank == 0 else 0, -self.rank, 1], dtype=torch.int32)
        out = hvd.allreduce(x, name="ar.trunc", op=hvd.Average)
        total = [-5, 5, -sum(range(self.size)), self.size]
        expected = torch.tensor([int(v / self.size) for v in total], dtype=torch.int32)
        self.assertTrue(torch.equal(out, expected), f"{out} != {expected}")
        if self.size > 1:
            self.assertEqual(int(out[0]), -int(out[1]))  # symmetric: truncation, not floor

    def test_prescale_postscale(self):
        jobs = []
        for dtype in DTYPES:
            for op in (hvd.Sum, hvd.Average):
                for pre, post in ((2.5, 1.0), (1.0, 0.5), (1.5, 0.75), (0.5, 2.0)):
                    data = all_ranks((4,), dtype, "scale", dtype, op, pre, post)
                    handle = hvd.allreduce_async(data[self.rank].clone(), name=f"ar.scale.{dname(dtype)}.{op}.{pre}.{post}",
                                                 op=op, prescale_factor=pre, postscale_factor=post)
                    jobs.append((handle, data, op, pre, post))
        for handle, data, op, pre, post in jobs:
            self.assertSameTensor(hvd.synchronize(handle), reference(data, op, pre, post),
                                  f"{data.dtype} op {op} pre {pre} post {post}")

    def test_in_place_and_positional_arguments(self):
        t = torch.full((3,), float(self.rank + 1))
        # allreduce_'s 4th positional argument is op.
        self.assertIs(hvd.allreduce_(t, None, "ar.inplace", hvd.Sum), t)
        self.assertTrue(torch.equal(t, torch.full((3,), self.size * (self.size + 1) / 2)))
        t = torch.full((2, 2), float(self.rank))
        handle = hvd.allreduce_async_(t, None, "ar.inplace_async", hvd.Max)
        self.assertIs(hvd.synchronize(handle), t)
        self.assertTrue(torch.equal(t, torch.full((2, 2), float(self.size - 1))))
        # allreduce's 4th positional argument is compression, then op.
        src = torch.full((3,), float(self.rank))
        out = hvd.allreduce(src, None, "ar.positional", hvd.Compression.none, hvd.Min)
        self.assertIsNot(out, src)
        self.assertTrue(torch.equal(out, torch.zeros(3)))
        self.assertTrue(torch.equal(src, torch.full((3,), float(self.rank))))
        # The default op is Average.
        self.assertTrue(torch.equal(hvd.allreduce(torch.full((2,), 2.0 * self.rank), name="ar.default"),
                                    torch.full((2,), float(self.size - 1))))

    def test_deprecated_average_argument(self):
        x = torch.full((2,), float(self.rank + 1))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            summed = hvd.allreduce(x, average=False, name="ar.average_false")
            averaged = hvd.allreduce(x, average=True, name="ar.average_true")
        self.assertTrue(any(issubclass(w.category, DeprecationWarning) for w in caught))
        total = self.size * (self.size + 1) / 2
        self.assertTrue(torch.equal(summed, torch.full((2,), total)))
        torch.testing.assert_close(averaged, torch.full((2,), total / self.size))
        with self.assertRaises(ValueError):
            hvd.allreduce(x, average=True, op=hvd.Sum, name="ar.both")
        with self.assertRaises(ValueError):
            hvd.allreduce_async_(x, average=False, op=hvd.Sum, name="ar.both_")
        self.assertCollectivesWork("average_argument")

    def test_handles_poll_synchronize(self):
        handle = hvd.allreduce_async(torch.ones(2), name="ar.handle", op=hvd.Sum)
        self.assertIs(type(handle), int)
        deadline = time.monotonic() + 60
        while not hvd.poll(handle):
            self.assertLess(time.monotonic(), deadline, "poll() never turned True")
            time.sleep(0.01)
        self.assertIs(hvd.poll(handle), True)
        self.assertTrue(torch.equal(hvd.synchronize(handle), torch.full((2,), float(self.size))))
        self.assertIsNone(hvd.synchronize(handle))  # already synchronized: None
        with self.assertRaises(ValueError):
            hvd.poll(handle)
        # Names are free-form: odd characters, very long, empty (= unnamed).
        for name in ("a name/with:odd chars ä+@", "n" * 300, ""):
            out = hvd.allreduce(torch.ones(2), name=name, op=hvd.Sum)
            self.assertTrue(torch.equal(out, torch.full((2,), float(self.size))), repr(name))
        handles = [hvd.allreduce_async(torch.ones(1) * i, name=f"ar.handles.{i}", op=hvd.Sum) for i in range(4)]
        self.assertEqual(len(set(handles)), 4)
        for i, h in reversed(list(enumerate(handles))):  # any order
            self.assertEqual(float(hvd.synchronize(h)), float(i * self.size))

    def test_grouped(self):
        shapes = [(2,), (3, 2), (1,), (4,), (2, 2, 2)]
        data = [all_ranks(s, torch.float32, "grouped", i) for i, s in enumerate(shapes)]
        mine = [d[self.rank].clone() for d in data]
        out = hvd.grouped_allreduce(mine, name="gar.sum", op=hvd.Sum)
        self.assertIsInstance(out, list)
        for o, d in zip(out, data):
            self.assertSameTensor(o, reference(d, hvd.Sum))
        for m, d in zip(mine, data):
            self.assertTrue(torch.equal(m, d[self.rank]))
        # Mixed dtypes in one group.
        mixed = [all_ranks((3,), dt, "grouped.mixed", i) for i, dt in enumerate((torch.int32, torch.float64,
                                                                                 torch.float32, torch.int64))]
        out = hvd.grouped_allreduce([d[self.rank] for d in mixed], name="gar.mixed", op=hvd.Average)
        for o, d in zip(out, mixed):
            self.assertSameTensor(o, reference(d, hvd.Average))
        # In place: a tuple of the very input tensors.
        inputs = [d[self.rank].clone() for d in data]
        ret = hvd.grouped_allreduce_(inputs, name="gar.inplace", op=hvd.Max)
        self.assertIsInstance(ret, tuple)
        for r, i, d in zip(ret, inputs, data):
            self.assertIs(r, i)
            self.assertSameTensor(i, reference(d, hvd.Max))
        handle = hvd.grouped_allreduce_async(mine, name="gar.async", op=hvd.Min)
        out = hvd.synchronize(handle)
        self.assertIsInstance(out, tuple)
        for o, d in zip(out, data):
            self.assertSameTensor(o, reference(d, hvd.Min))
        inputs = [d[self.rank].clone() for d in data]
        out = hvd.synchronize(hvd.grouped_allreduce_async_(inputs, name="gar.async_", op=hvd.Average,
                                                           postscale_factor=2.0))
        self.assertIsInstance(out, tuple)
        for o, i, d in zip(out, inputs, data):
            self.assertIs(o, i)
            self.assertSameTensor(o, reference(d, hvd.Average, post=2.0))

    def test_sparse_allreduce_async(self):
        """Sparse COO tensors with a different number of entries per rank:
        the callable handle gives the (uncoalesced) reduction."""
        for i, op in enumerate((hvd.Average, hvd.Sum)):
            g = gen("sparse", self.rank, i)
            nnz = 1 + self.rank
            indices = torch.stack([torch.randint(0, 5, (nnz,), generator=g), torch.randint(0, 3, (nnz,), generator=g)])
            values = torch.randint(-5, 5, (nnz,), generator=g).float()
            t = torch.sparse_coo_tensor(indices, values, (5, 3))
            handle = hvd.sparse_allreduce_async(t, name=f"sparse.{i}", op=op)
            self.assertTrue(callable(handle))
            out = handle()
            self.assertTrue(out.is_sparse)
            self.assertEqual(tuple(out.shape), (5, 3))
            dense = hvd.allreduce(t.to_dense(), name=f"sparse.dense.{i}", op=op)
            torch.testing.assert_close(out.to_dense(), dense)

    def test_push_pull(self):
        x = torch.full((3,), float(self.rank))
        torch.testing.assert_close(hvd.push_pull(x, name="pp.avg"), torch.full((3,), (self.size - 1) / 2))
        self.assertTrue(torch.equal(hvd.synchronize(hvd.push_pull_async(x, average=False, name="pp.sum")),
                                    torch.full((3,), float(sum(range(self.size))))))

    def test_unsupported_and_unusual_tensors(self):
        for bad in (torch.ones(2, dtype=torch.bool), torch.ones(2, dtype=torch.complex64)):
            with self.assertRaises(ValueError):
                hvd.allreduce(bad, name="ar.bad_dtype")
        # Non-contiguous input (a transposed view) and empty tensors.
        base = all_ranks((3, 2), torch.float32, "noncontiguous")
        view = base[self.rank].t()
        self.assertFalse(view.is_contiguous())
        out = hvd.allreduce(view, name="ar.noncontiguous", op=hvd.Sum)
        self.assertSameTensor(out, reference(base, hvd.Sum).t().contiguous())
        empty = hvd.allreduce(torch.empty(0, 3), name="ar.empty", op=hvd.Sum)
        self.assertEqual(tuple(empty.shape), (0, 3))
        scalar = hvd.allreduce(torch.tensor(float(self.rank)), name="ar.scalar", op=hvd.Sum)
        self.assertEqual(scalar.dim(), 0)
        self.assertEqual(float(scalar), float(sum(range(self.size))))


# ---------------------------------------------------------------- allgather


ROWS = [3, 0, 2, 5, 1]


class T03Allgather(Case):
    def gathered(self, dtype, dim):
        """(this rank's tensor, the expected concatenation): rank r has
        ROWS[r % 5] rows (rank 1 none), row i filled with r * 10 + i."""
        parts = []
        for r in range(self.size):
            rows = ROWS[r % len(ROWS)]
            col = torch.tensor([r * 10 + i for i in range(rows)], dtype=torch.float64)
            parts.append(col.view(-1, *([1] * (dim - 1))).expand(rows, *([2] * (dim - 1))).to(dtype).contiguous())
        return parts[self.rank], torch.cat(parts)

    def test_variable_first_dimension_every_dtype_async(self):
        jobs, pending_seen = [], False
        for dtype in DTYPES:
            for dim in (1, 2, 3):
                mine, expected = self.gathered(dtype, dim)
                handle = hvd.allgather_async(mine, name=f"ag.{dname(dtype)}.{dim}")
                pending_seen |= not hvd.poll(handle)
                jobs.append((handle, expected))
        self.assertTrue(pending_seen)
        for handle, expected in jobs:
            self.assertSameTensor(hvd.synchronize(handle), expected)
        mine, expected = self.gathered(torch.float32, 2)
        self.assertSameTensor(hvd.allgather(mine, name="ag.sync"), expected)

    def test_grouped(self):
        pairs = [self.gathered(dt, d) for dt, d in ((torch.float32, 1), (torch.int64, 2), (torch.float16, 3))]
        out = hvd.grouped_allgather([m for m, _ in pairs], name="gag")
        self.assertIsInstance(out, tuple)
        for o, (_, e) in zip(out, pairs):
            self.assertSameTensor(o, e)
        out = hvd.synchronize(hvd.grouped_allgather_async([m for m, _ in pairs], name="gag.async"))
        self.assertIsInstance(out, tuple)
        for o, (_, e) in zip(out, pairs):
            self.assertSameTensor(o, e)


# ---------------------------------------------------------------- broadcast


class T04Broadcast(Case):
    def test_every_root_dtype_and_dim(self):
        jobs = []
        for root in range(self.size):
            for dtype in DTYPES:
                for dim in (1, 2):
                    data = all_ranks((3,) * dim, dtype, "broadcast", root, dtype, dim)
                    mine = data[self.rank].clone()
                    jobs.append((hvd.broadcast_async(mine, root, name=f"bc.{root}.{dname(dtype)}.{dim}"), root, data,
                                 mine))
        for handle, root, data, mine in jobs:
            out = hvd.synchronize(handle)
            self.assertSameTensor(out, data[root], f"root {root}")
            self.assertTrue(torch.equal(mine, data[self.rank]), "the source changed")
            self.assertNotEqual(out.data_ptr(), mine.data_ptr(), "the output shares the input's memory")
        # The autograd form: a new tensor everywhere, the root's too.
        for root in range(self.size):
            mine = torch.full((2, 3), float(self.rank))
            out = hvd.broadcast(mine, root, name=f"bc.autograd.{root}")
            self.assertTrue(torch.equal(out, torch.full((2, 3), float(root))))
            self.assertTrue(torch.equal(mine, torch.full((2, 3), float(self.rank))))
            out.add_(1)
            self.assertTrue(torch.equal(mine, torch.full((2, 3), float(self.rank))), "output aliases the input")

    def test_in_place(self):
        for root in range(self.size):
            t = torch.full((4,), self.rank * 3, dtype=torch.int16)
            self.assertIs(hvd.broadcast_(t, root, name=f"bc.inplace.{root}"), t)
            self.assertTrue(torch.equal(t, torch.full((4,), root * 3, dtype=torch.int16)))
            t = torch.full((2, 2), float(self.rank))
            self.assertIs(hvd.synchronize(hvd.broadcast_async_(t, root, name=f"bc.inplace_async.{root}")), t)
            self.assertTrue(torch.equal(t, torch.full((2, 2), float(root))))


# ---------------------------------------------------------------- alltoall


def a2a_rows(src, dst):
    return (src + 2 * dst) % 3


def a2a_value(src, dst, k):
    return src * 30 + dst * 8 + k


class T05Alltoall(Case):
    def rows_for(self, values, dtype, dim):
        col = torch.tensor(values, dtype=torch.float64)
        return col.view(-1, *([1] * (dim - 1))).expand(len(values), *([2] * (dim - 1))).to(dtype).contiguous()

    def test_splits_every_dtype(self):
        """Rank s sends a2a_rows(s, d) rows to rank d (some none) plus a last
        row that no split covers; splits as a list, a tuple or an int32 tensor."""
        jobs = []
        me, size = self.rank, self.size
        splits = [a2a_rows(me, d) for d in range(size)]
        sent = [a2a_value(me, d, k) for d in range(size) for k in range(splits[d])] + [99]
        expected = [a2a_value(s, me, k) for s in range(size) for k in range(a2a_rows(s, me))]
        for dtype in DTYPES:
            for dim in (1, 2, 3):
                form = (list(splits), tuple(splits), torch.tensor(splits, dtype=torch.int32))[dim - 1]
                handle = hvd.alltoall_async(self.rows_for(sent, dtype, dim), form, name=f"a2a.{dname(dtype)}.{dim}")
                jobs.append((handle, dtype, dim))
        for handle, dtype, dim in jobs:
            result = hvd.synchronize(handle)
            self.assertIsInstance(result, tuple)
            out, received = result
            self.assertSameTensor(out, self.rows_for(expected, dtype, dim), f"{dtype} dim {dim}")
            self.assertEqual(received.dtype, torch.int32)
            self.assertEqual(received.tolist(), [a2a_rows(s, me) for s in range(size)])
        out, received = hvd.alltoall(self.rows_for(sent, torch.float32, 2), splits, name="a2a.autograd")
        self.assertSameTensor(out, self.rows_for(expected, torch.float32, 2))
        self.assertEqual(received.tolist(), [a2a_rows(s, me) for s in range(size)])

    def test_equal_split(self):
        me, size = self.rank, self.size
        x = torch.tensor([[me * 100 + d * 10 + k] for d in range(size) for k in range(2)], dtype=torch.int64)
        expected = torch.tensor([[s * 100 + me * 10 + k] for s in range(size) for k in range(2)], dtype=torch.int64)
        out = hvd.alltoall(x, name="a2a.equal")
        self.assertIsInstance(out, torch.Tensor)  # no splits: the tensor only
        self.assertTrue(torch.equal(out, expected))
        result = hvd.synchronize(hvd.alltoall_async(x, name="a2a.equal_async"))
        self.assertIsInstance(result, tuple)  # synchronize: always (output, received_splits)
        self.assertTrue(torch.equal(result[0], expected))
        self.assertEqual(result[1].tolist(), [2] * size)


# ---------------------------------------------------------------- reducescatter


class T06Reducescatter(Case):
    def test_sum_average_uneven_every_dtype_async(self):
        jobs, pending_seen = [], False
        for dtype in DTYPES:
            for op in (hvd.Sum, hvd.Average):
                for dim in (1, 2, 3):
                    n = 2 * self.size + 1  # uneven: rank 0 gets one row more
                    data = all_ranks((n,) + (2,) * (dim - 1), dtype, "rs", dtype, op, dim)
                    handle = hvd.reducescatter_async(data[self.rank].clone(), name=f"rs.{dname(dtype)}.{op}.{dim}",
                                                     op=op)
                    pending_seen |= not hvd.poll(handle)
                    jobs.append((handle, data, op, n))
        self.assertTrue(pending_seen)
        for handle, data, op, n in jobs:
            first, rows = split_rows(n, self.size, self.rank)
            self.assertSameTensor(hvd.synchronize(handle), reference(data, op)[first:first + rows],
                                  f"{data.dtype} op {op}")

    def test_fewer_rows_than_ranks_and_default_op(self):
        n = self.size - 1 if self.size > 1 else 1
        for dtype in (torch.float32, torch.int32):
            data = all_ranks((n, 3), dtype, "rs.few", dtype)
            first, rows = split_rows(n, self.size, self.rank)
            out = hvd.reducescatter(data[self.rank].clone(), name=f"rs.few.{dname(dtype)}", op=hvd.Sum)
            self.assertSameTensor(out, reference(data, hvd.Sum)[first:first + rows])
        data = all_ranks((2 * self.size,), torch.float64, "rs.default")
        first, rows = split_rows(2 * self.size, self.size, self.rank)
        out = hvd.reducescatter(data[self.rank].clone(), name="rs.default")  # op=Average by default
        self.assertSameTensor(out, reference(data, hvd.Average)[first:first + rows])

    def test_prescale_postscale(self):
        for dtype in (torch.int32, torch.int64, torch.float16, torch.float32, torch.float64):
            for op in (hvd.Sum, hvd.Average):
                for pre, post in ((2.5, 1.0), (1.0, 0.5)):
                    n = self.size + 1
                    data = all_ranks((n, 2), dtype, "rs.scale", dtype, op, pre, post)
                    out = hvd.reducescatter(data[self.rank].clone(), name=f"rs.scale.{dname(dtype)}.{op}.{pre}",
                                            op=op, prescale_factor=pre, postscale_factor=post)
                    first, rows = split_rows(n, self.size, self.rank)
                    self.assertSameTensor(out, reference(data, op, pre, post)[first:first + rows])

    def test_grouped(self):
        datas = [all_ranks((self.size + i, 2), dt, "grs", i)
                 for i, dt in enumerate((torch.float32, torch.int64, torch.float64))]
        out = hvd.grouped_reducescatter([d[self.rank].clone() for d in datas], name="grs", op=hvd.Sum)
        self.assertIsInstance(out, list)
        for o, d in zip(out, datas):
            first, rows = split_rows(d.shape[1], self.size, self.rank)
            self.assertSameTensor(o, reference(d, hvd.Sum)[first:first + rows])
        out = hvd.synchronize(hvd.grouped_reducescatter_async([d[self.rank].clone() for d in datas], name="grs.async",
                                                              op=hvd.Average))
        for o, d in zip(out, datas):
            first, rows = split_rows(d.shape[1], self.size, self.rank)
            self.assertSameTensor(o, reference(d, hvd.Average)[first:first + rows])
        out = hvd.grouped_reducescatter([d[self.rank].clone() for d in datas], name="grs.scaled", op=hvd.Sum,
                                        prescale_factor=2.0, postscale_factor=0.5)
        for o, d in zip(out, datas):
            first, rows = split_rows(d.shape[1], self.size, self.rank)
            self.assertSameTensor(o, reference(d, hvd.Sum, 2.0, 0.5)[first:first + rows])


# ---------------------------------------------------------------- barrier and join


class T07BarrierJoin(Case):
    def test_barrier_completes_pending_ops(self):
        bc = hvd.broadcast_async(torch.full((2,), float(self.rank)), 0, name="barrier.bc")
        ag1 = hvd.allgather_async(torch.ones(1, 2), name="barrier.ag1")
        ag2 = hvd.allgather_async(torch.ones(2, 1), name="barrier.ag2")
        ar = hvd.allreduce_async(torch.eye(3), name="barrier.ar", op=hvd.Average)
        self.assertIsNone(hvd.barrier())
        self.assertTrue(torch.equal(hvd.synchronize(ar), torch.eye(3)))
        self.assertTrue(torch.equal(hvd.synchronize(bc), torch.zeros(2)))
        self.assertEqual(tuple(hvd.synchronize(ag1).shape), (self.size, 2))
        self.assertEqual(tuple(hvd.synchronize(ag2).shape), (2 * self.size, 1))

    def test_barrier_waits_for_every_rank(self):
        hvd.barrier()
        if self.rank == 0:
            time.sleep(3.0)
        started = time.monotonic()
        hvd.barrier()
        waited = time.monotonic() - started
        if self.rank != 0:
            self.assertGreater(waited, 1.5, "barrier returned before rank 0 called it")

    def test_join_allreduce_counts_joined_rank_as_zeros(self):
        """Each rank in turn joins first; the others' allreduces see its zeros
        (Average still divides by the full size; Max sees 0 above negative
        inputs), and join returns the last rank to join, everywhere."""
        size = self.size
        for first in range(size):
            x = torch.full((3,), self.rank + 1, dtype=torch.int32)
            if self.rank == first:
                last = hvd.join()
            else:
                others = sum(r + 1 for r in range(size) if r != first)
                out = hvd.allreduce(x, name="join.sum", op=hvd.Sum)
                self.assertTrue(torch.equal(out, torch.full((3,), others, dtype=torch.int32)), f"{out}")
                out = hvd.allreduce(x, name="join.avg", op=hvd.Average)
                self.assertTrue(torch.equal(out, torch.full((3,), int(others / size), dtype=torch.int32)), f"{out}")
                out = hvd.allreduce(-x.double(), name="join.max", op=hvd.Max)
                self.assertTrue(torch.equal(out, torch.zeros(3, dtype=torch.float64)), f"{out}")
                out = hvd.allreduce(x, name="join.min", op=hvd.Min)
                self.assertTrue(torch.equal(out, torch.zeros(3, dtype=torch.int32)), f"{out}")
                out = hvd.allreduce(x.half(), name="join.product", op=hvd.Product)
                self.assertTrue(torch.equal(out, torch.zeros(3, dtype=torch.float16)), f"{out}")
                out = hvd.grouped_allreduce([x, x.float()], name="join.grouped", op=hvd.Sum)
                self.assertTrue(torch.equal(out[1], torch.full((3,), float(others))), f"{out}")
                last = hvd.join()
            lasts = self.assertEverywhere(last, f"join.last.{first}")
            if size > 1:
                self.assertNotEqual(lasts[0], first)
            self.assertIn(last, range(size))
            # Everyone is back: the same names work with every rank again.
            out = hvd.allreduce(x, name="join.sum", op=hvd.Sum)
            self.assertTrue(torch.equal(out, torch.full((3,), size * (size + 1) // 2, dtype=torch.int32)))

    def test_join_two_ranks_joined(self):
        if self.size != 4:
            self.skipTest("needs 4 ranks")
        for pair in ((0, 1), (2, 3)):
            x = torch.full((2,), float(self.rank + 1))
            if self.rank in pair:
                last = hvd.join()
            else:
                others = sum(r + 1 for r in range(self.size) if r not in pair)
                out = hvd.allreduce(x, name="join2.sum", op=hvd.Sum)
                self.assertTrue(torch.equal(out, torch.full((2,), float(others))))
                last = hvd.join()
            lasts = self.assertEverywhere(last, "join2.last")
            self.assertNotIn(lasts[0], pair)

    def test_join_other_collectives_raise(self):
        """With a joined rank, allgather, broadcast, alltoall and reducescatter
        raise on the others; the joined rank just waits in join()."""
        size = self.size
        if size < 2:
            self.skipTest("needs 2 ranks")
        for first in range(size):
            if self.rank == first:
                last = hvd.join()
            else:
                root = (first + 1) % size
                calls = [
                    ("allgather", lambda: hvd.allgather(torch.ones(2, 2), name="join.ag")),
                    ("broadcast", lambda: hvd.broadcast(torch.ones(2), root, name="join.bc")),
                    ("alltoall", lambda: hvd.alltoall(torch.ones(size, 2), name="join.a2a")),
                    ("reducescatter", lambda: hvd.reducescatter(torch.ones(size, 2), name="join.rs")),
                ]
                for what, call in calls:
                    with self.assertRaises(hvd.HorovodInternalError, msg=what):
                        call()
                last = hvd.join()
            lasts = self.assertEverywhere(last, f"join.raise.last.{first}")
            self.assertNotEqual(lasts[0], first)
        out = hvd.allgather(torch.ones(1, 2), name="join.ag")
        self.assertEqual(tuple(out.shape), (size, 2))


# ---------------------------------------------------------------- autograd


class T08Autograd(Case):
    def test_allreduce(self):
        for dtype in (torch.float32, torch.float64):
            for dim in (1, 2):
                for op, pre, factor in ((hvd.Sum, 1.0, self.size), (hvd.Average, 1.0, 1), (hvd.Sum, 2.0,
                                                                                            2 * self.size)):
                    x = torch.full((2,) * dim, float(self.rank), dtype=dtype, requires_grad=True)
                    y = hvd.allreduce(x, op=op, prescale_factor=pre)
                    y.backward(torch.ones_like(y))
                    self.assertTrue(torch.equal(x.grad, torch.full_like(x, float(factor))), f"{op} {x.grad}")

    def test_allgather(self):
        size = self.size
        rows = [ROWS[r % len(ROWS)] + 1 for r in range(size)]
        x = torch.full((rows[self.rank], 2), float(self.rank), requires_grad=True)
        y = hvd.allgather(x)
        self.assertEqual(tuple(y.shape), (sum(rows), 2))
        # The same gradient on every rank (block r filled with r): the average is itself.
        grad = torch.cat([torch.full((rows[r], 2), float(r)) for r in range(size)])
        y.backward(grad)
        self.assertTrue(torch.equal(x.grad, torch.full_like(x, float(self.rank))))
        # Gradients that differ per rank: this rank's rows of their average.
        x = torch.ones(rows[self.rank], 2, requires_grad=True)
        y = hvd.allgather(x)
        grads = all_ranks((sum(rows), 2), torch.float64, "ag.grad").float()
        y.backward(grads[self.rank])
        offset = sum(rows[:self.rank])
        torch.testing.assert_close(x.grad, grads.mean(0)[offset:offset + rows[self.rank]])

    def test_broadcast(self):
        for root in range(self.size):
            x = torch.full((3,), float(self.rank), requires_grad=True)
            y = hvd.broadcast(x, root)
            y.backward(torch.ones_like(y))
            expected = torch.ones(3) if self.rank == root else torch.zeros(3)
            self.assertTrue(torch.equal(x.grad, expected), f"root {root}: {x.grad}")

    def test_alltoall(self):
        me, size = self.rank, self.size
        splits = [a2a_rows(me, d) for d in range(size)]
        sent = sum(splits)
        x = (torch.arange(float(sent + 1)) + 100 * me).view(-1, 1).repeat(1, 2).requires_grad_()
        y, received = hvd.alltoall(x, splits)
        self.assertFalse(received.requires_grad)
        # Each row's gradient is its value: it must come back to where it was sent from.
        y.backward(y.detach())
        expected = x.detach().clone()
        expected[sent:] = 0  # the row no split covers was not sent: no gradient
        self.assertTrue(torch.equal(x.grad, expected), f"{x.grad} != {expected}")
        x = torch.ones(2 * size, 3, requires_grad=True)
        y = hvd.alltoall(x)
        y.backward(torch.ones_like(y))
        self.assertTrue(torch.equal(x.grad, torch.ones(2 * size, 3)))

    def test_reducescatter(self):
        for op, factor in ((hvd.Sum, self.size), (hvd.Average, 1)):
            n = 2 * self.size + 1
            x = torch.full((n, 2), float(self.rank), requires_grad=True)
            y = hvd.reducescatter(x, op=op)
            y.backward(torch.ones_like(y))
            self.assertTrue(torch.equal(x.grad, torch.full((n, 2), float(factor))), f"{op}: {x.grad}")
        x = torch.ones(self.size, 2, requires_grad=True)
        y = hvd.reducescatter(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
        y.backward(torch.ones_like(y))
        torch.testing.assert_close(x.grad, torch.full((self.size, 2), 1.5 * self.size))

    def test_grouped(self):
        xs = [torch.full((2,) * (i + 1), float(self.rank), requires_grad=True) for i in range(3)]
        ys = hvd.grouped_allreduce(xs, op=hvd.Sum)
        for y in ys:  # each output's backward separately
            y.backward(torch.ones_like(y))
        for x in xs:
            self.assertTrue(torch.equal(x.grad, torch.full_like(x, float(self.size))))
        xs = [torch.full((2,), float(self.rank), requires_grad=True) for _ in range(2)]
        ys = hvd.grouped_allreduce(xs, op=hvd.Average)
        sum(y.sum() for y in ys).backward()
        for x in xs:
            self.assertTrue(torch.equal(x.grad, torch.ones(2)))
        rows = [ROWS[r % len(ROWS)] + 1 for r in range(self.size)]
        xs = [torch.ones(rows[self.rank], k + 1, requires_grad=True) for k in range(2)]
        ys = hvd.grouped_allgather(xs)
        sum((y * float(self.rank + 1)).sum() for y in ys).backward()
        mean = sum(r + 1 for r in range(self.size)) / self.size
        for x in xs:
            torch.testing.assert_close(x.grad, torch.full_like(x, mean))
        xs = [torch.ones(self.size + k, 2, requires_grad=True) for k in range(2)]
        ys = hvd.grouped_reducescatter(xs, op=hvd.Sum)
        sum(y.sum() for y in ys).backward()
        for x in xs:
            self.assertTrue(torch.equal(x.grad, torch.full_like(x, float(self.size))))


# ---------------------------------------------------------------- errors


class T09Errors(Case):
    def test_allreduce_mismatches(self):
        if self.size < 2:
            self.skipTest("needs 2 ranks")
        rank = self.rank
        cases = [
            ("shape", lambda: hvd.allreduce(torch.ones((3 + rank,) * 2), name="err.ar")),
            ("ndim", lambda: hvd.allreduce(torch.ones(4, 6) if rank == 0 else torch.ones(2, 3, 4), name="err.ar")),
            ("dtype", lambda: hvd.allreduce(torch.ones(3, dtype=torch.int32 if rank % 2 == 0 else torch.float32),
                                            name="err.ar")),
            ("op", lambda: hvd.allreduce(torch.ones(3), name="err.ar", op=hvd.Sum if rank % 2 == 0 else hvd.Max)),
            ("prescale", lambda: hvd.allreduce(torch.ones(3), name="err.ar", prescale_factor=1.0 + rank)),
            ("postscale", lambda: hvd.allreduce(torch.ones(3), name="err.ar", postscale_factor=1.0 + rank)),
            ("grouped", lambda: hvd.grouped_allreduce([torch.ones(2), torch.ones(1 + rank)], name="err.gar")),
            ("unnamed", lambda: hvd.allreduce(torch.ones(2 + rank))),
        ]
        for what, call in cases:
            message = self.raisesEverywhere(hvd.HorovodInternalError, call)
            self.assertIsNotNone(message, what)
            # The same name works right after the error.
            out = hvd.allreduce(torch.ones(3), name="err.ar", op=hvd.Sum)
            self.assertTrue(torch.equal(out, torch.full((3,), float(self.size))), what)
        message = self.raisesEverywhere(RuntimeError, lambda: hvd.allreduce(torch.ones(5 + rank), name="err.msg"))
        self.assertIn("Mismatched ALLREDUCE tensor shapes", message)
        self.assertCollectivesWork("allreduce_mismatches")

    def test_other_mismatches(self):
        if self.size < 2:
            self.skipTest("needs 2 ranks")
        rank, size = self.rank, self.size
        cases = [
            ("allgather dim 1", lambda: hvd.allgather(torch.ones(2, 2 * (rank + 1)), name="err.ag")),
            ("allgather ndim", lambda: hvd.allgather(torch.ones(2, 2) if rank == 0 else torch.ones(2, 2, 1),
                                                     name="err.ag")),
            ("allgather dtype", lambda: hvd.allgather(torch.ones(2, dtype=torch.int32 if rank % 2 else torch.float32),
                                                      name="err.ag")),
            ("allgather scalar", lambda: hvd.synchronize(hvd.allgather_async(torch.tensor(1.0), name="err.ag0"))),
            ("broadcast shape", lambda: hvd.broadcast(torch.ones(2, rank + 1), 0, name="err.bc")),
            ("broadcast dtype", lambda: hvd.broadcast(torch.ones(2, dtype=torch.int32 if rank % 2 else torch.float32),
                                                      0, name="err.bc")),
            ("broadcast root", lambda: hvd.broadcast(torch.ones(2), rank, name="err.bc")),
            ("alltoall dtype", lambda: hvd.alltoall(torch.ones(size, dtype=torch.int32 if rank % 2 else torch.float32),
                                                    name="err.a2a")),
            ("alltoall dim 1", lambda: hvd.alltoall(torch.ones(size, rank + 1), name="err.a2a")),
            ("reducescatter shape", lambda: hvd.reducescatter(torch.ones(size, rank + 1), name="err.rs")),
            ("reducescatter dtype",
             lambda: hvd.reducescatter(torch.ones(size, dtype=torch.int32 if rank % 2 else torch.float32),
                                       name="err.rs")),
        ]
        for what, call in cases:
            self.assertIsNotNone(self.raisesEverywhere(hvd.HorovodInternalError, call), what)
        # Every name works afterwards.
        self.assertEqual(tuple(hvd.allgather(torch.ones(1, 2), name="err.ag").shape), (size, 2))
        self.assertTrue(torch.equal(hvd.broadcast(torch.full((2,), float(rank)), 1, name="err.bc"),
                                    torch.ones(2)))
        self.assertEqual(tuple(hvd.alltoall(torch.ones(size, 2), name="err.a2a").shape), (size, 2))
        self.assertEqual(tuple(hvd.reducescatter(torch.ones(size, 2), name="err.rs").shape), (1, 2))
        self.assertCollectivesWork("other_mismatches")

    def test_duplicate_names(self):
        def dup(submit, *args):
            first = submit(*args, name="duplicate_name")
            with self.assertRaises(ValueError, msg=submit.__name__):
                submit(*args, name="duplicate_name")
            return hvd.synchronize(first)

        x = torch.ones(self.size, 2)
        self.assertTrue(torch.equal(dup(hvd.allreduce_async, x, None), x))
        self.assertTrue(torch.equal(dup(hvd.allreduce_async_, x.clone(), None), x))
        dup(hvd.grouped_allreduce_async, [x, x], None)
        self.assertEqual(tuple(dup(hvd.allgather_async, x).shape), (self.size ** 2, 2))
        self.assertTrue(torch.equal(dup(hvd.broadcast_async, x, 0), x))
        self.assertTrue(torch.equal(dup(hvd.broadcast_async_, x.clone(), 0), x))
        self.assertTrue(torch.equal(dup(hvd.alltoall_async, x)[0], x))
        self.assertTrue(torch.equal(dup(hvd.reducescatter_async, x), torch.ones(1, 2)))
        self.assertCollectivesWork("duplicate_names")

    def test_local_argument_errors(self):
        size = self.size
        with self.assertRaises(ValueError):
            hvd.broadcast(torch.ones(2), size, name="err.root")
        with self.assertRaises(ValueError):
            hvd.broadcast_(torch.ones(2), -1, name="err.root_")
        with self.assertRaises(ValueError):
            hvd.broadcast_async(torch.ones(2), size + 3)
        with self.assertRaises(ValueError):  # not a multiple of the size
            hvd.alltoall(torch.ones(size + 1), name="err.a2a.equal")
        with self.assertRaises(ValueError):  # splits sum above the first dimension
            hvd.alltoall(torch.ones(size - 1 if size > 1 else 0), torch.ones(size, dtype=torch.int32))
        with self.assertRaises(ValueError):  # float splits
            hvd.alltoall(torch.ones(size), torch.ones(size, dtype=torch.float32))
        with self.assertRaises(ValueError):  # 2-D splits
            hvd.alltoall(torch.ones(size), torch.ones(1, size, dtype=torch.int32))
        with self.assertRaises(ValueError):  # one split too many
            hvd.alltoall(torch.ones(size + 1), [1] * (size + 1))
        with self.assertRaises(ValueError):
            hvd.reducescatter(torch.tensor(float(self.rank)), name="err.rs.scalar")
        with self.assertRaises(ValueError):
            hvd.grouped_reducescatter([torch.zeros(3, 1), torch.tensor(1.0)], name="err.grs.scalar")
        with self.assertRaises(hvd.HorovodInternalError):  # only Sum and Average
            hvd.reducescatter(torch.ones(size, 2), name="err.rs.min", op=hvd.Min)
        with self.assertRaises(RuntimeError):
            hvd.reducescatter(torch.ones(size, 2), name="err.rs.adasum", op=hvd.Adasum)
        for call in (lambda: hvd.allreduce(torch.ones(2), op=hvd.Adasum),
                     lambda: hvd.allreduce_async(torch.ones(2), op=hvd.Adasum),
                     lambda: hvd.allreduce_(torch.ones(2), op=hvd.Adasum),
                     lambda: hvd.grouped_allreduce([torch.ones(2)], op=hvd.Adasum),
                     lambda: hvd.DistributedOptimizer(torch.optim.SGD(make_model(0).parameters(), lr=0.1),
                                                      op=hvd.Adasum)):
            with self.assertRaises(NotImplementedError):
                call()
        self.assertCollectivesWork("local_argument_errors")


# ---------------------------------------------------------------- functions


class T10Functions(Case):
    def gathered_params(self, tensors, name):
        flat = torch.cat([t.detach().reshape(-1).double() for t in tensors])
        return hvd.allgather(flat.unsqueeze(0), name=name)

    def test_broadcast_parameters(self):
        root = self.size - 1
        model = make_model("bp", self.rank)
        hvd.broadcast_parameters(model.state_dict(), root_rank=root)
        rows = self.gathered_params(model.state_dict().values(), "bp.dict")
        self.assertTrue(torch.equal(rows[self.rank], model_params(make_model("bp", root))))
        for r in range(self.size):
            self.assertTrue(torch.equal(rows[r], rows[root]))
        # A list of (name, tensor), and of bare tensors.
        model = make_model("bp.list", self.rank)
        hvd.broadcast_parameters(list(model.named_parameters()), root_rank=0)
        self.assertTrue(torch.equal(model_params(model), model_params(make_model("bp.list", 0))))
        tensors = [torch.full((2,), float(self.rank)), torch.full((1, 3), float(-self.rank))]
        hvd.broadcast_parameters(tensors, root_rank=root)
        self.assertTrue(torch.equal(tensors[0], torch.full((2,), float(root))))
        self.assertTrue(torch.equal(tensors[1], torch.full((1, 3), float(-root))))
        for bad in (model.parameters(), model.named_parameters(), (p for p in tensors)):
            with self.assertRaises(ValueError):
                hvd.broadcast_parameters(bad, root_rank=0)

    def compare_state(self, opt, name, root):
        """Every rank's optimizer state_dict equals the root's: values and types."""
        states = hvd.allgather_object(opt.state_dict(), name=name)
        mine, theirs = states[self.rank], states[root]
        self.assertEqual(len(mine["state"]), len(theirs["state"]))
        self.assertEqual(len(mine["param_groups"]), len(theirs["param_groups"]))
        for g_mine, g_root in zip(mine["param_groups"], theirs["param_groups"]):
            self.assertEqual(set(g_mine), set(g_root))
            for key, value in g_root.items():
                self.assertIs(type(g_mine[key]), type(value), key)
                self.assertEqual(g_mine[key], value, key)
        for pid, state in theirs["state"].items():
            self.assertEqual(set(mine["state"][pid]), set(state))
            for key, value in state.items():
                actual = mine["state"][pid][key]
                self.assertIs(type(actual), type(value), key)
                if torch.is_tensor(value):
                    self.assertTrue(torch.equal(actual, value), key)
                else:
                    self.assertEqual(actual, value, key)

    def test_broadcast_optimizer_state(self):
        root = self.size - 1
        makers = [
            ("sgd", lambda params, r: torch.optim.SGD(params, lr=0.1 * (r + 1), momentum=0.9)),
            ("adam", lambda params, r: torch.optim.Adam(params, lr=0.01 * (r + 1), betas=(0.9, 0.99 - 0.01 * r),
                                                        weight_decay=0.0)),
        ]
        for label, make in makers:
            # After a local step on different data: different state and options per rank.
            model = make_model("bos", label, self.rank)
            opt = make(model.parameters(), self.rank)
            loss_of(model, *batch(self.rank, 0)).backward()
            opt.step()
            hvd.broadcast_parameters(model.state_dict(), root_rank=root)
            hvd.broadcast_optimizer_state(opt, root_rank=root)
            self.compare_state(opt, f"bos.{label}", root)
            self.assertEqual(opt.param_groups[0]["lr"], make([torch.zeros(1, requires_grad=True)], root)
                             .param_groups[0]["lr"])
            # A further step, the same everywhere.
            opt.zero_grad()
            loss_of(model, *batch(0, 1)).backward()
            opt.step()
            rows = self.gathered_params(model.parameters(), f"bos.{label}.after")
            for r in range(self.size):
                self.assertTrue(torch.equal(rows[r], rows[0]))
            # A fresh optimizer (no state yet): initialized, then broadcast.
            model = make_model("bos.fresh", label, self.rank)
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            opt = make(model.parameters(), self.rank)
            hvd.broadcast_optimizer_state(opt, root_rank=0)
            self.assertGreater(len(opt.state_dict()["state"]), 0)
            self.compare_state(opt, f"bos.{label}.fresh", 0)
        with self.assertRaises(ValueError):
            hvd.broadcast_optimizer_state(torch.optim.LBFGS(make_model(1).parameters()), root_rank=0)

    def test_broadcast_optimizer_state_wrapped_with_frozen_parameter(self):
        """A fresh DistributedOptimizer: its state is initialized without a
        collective step; a parameter without requires_grad keeps grad None."""
        model = make_model("bos.wrapped", self.rank)
        model[0].bias.requires_grad_(False)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1 + self.rank, momentum=0.5),
                                       named_parameters=model.named_parameters())
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        self.assertIsNone(model[0].bias.grad)
        for name, p in model.named_parameters():
            if p.requires_grad:
                self.assertTrue(torch.equal(p.grad, torch.zeros_like(p)), name)
        self.assertEqual(opt.param_groups[0]["lr"], 0.1)
        self.compare_state(opt, "bos.wrapped", 0)
        # Training goes on normally afterwards.
        opt.zero_grad()
        loss_of(model, *batch(self.rank, 0)).backward()
        opt.step()
        rows = self.gathered_params(model.parameters(), "bos.wrapped.after")
        for r in range(self.size):
            self.assertTrue(torch.equal(rows[r], rows[0]))

    def test_broadcast_object(self):
        for root in sorted({0, self.size - 1}):
            obj = {"rank": self.rank, "list": [1, (2, 3.5)], "tensor": torch.arange(3) * self.rank, "none": None}
            got = hvd.broadcast_object(obj, root_rank=root)
            if self.rank == root:
                self.assertIs(got, obj)
            else:
                self.assertEqual(got["rank"], root)
                self.assertEqual(got["list"], [1, (2, 3.5)])
                self.assertTrue(torch.equal(got["tensor"], torch.arange(3) * root))
                self.assertIsNone(got["none"])
        got = hvd.broadcast_object(("named", self.rank), root_rank=0, name="custom")
        self.assertEqual(got, ("named", 0))
        self.assertEqual(hvd.broadcast_object(None, root_rank=0), None)

    def test_allgather_object(self):
        obj = {"rank": self.rank, "payload": "x" * (self.rank * 7)}
        got = hvd.allgather_object(obj)
        self.assertEqual(got, [{"rank": r, "payload": "x" * (r * 7)} for r in range(self.size)])
        self.assertIsNot(got[self.rank], obj)
        self.assertEqual(hvd.allgather_object(self.rank * 2, name="ints"), [r * 2 for r in range(self.size)])


# ---------------------------------------------------------------- DistributedOptimizer


class ThreeLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 6)
        self.fc2 = torch.nn.Linear(6, 2)
        self.fc3 = torch.nn.Linear(2, 2)
        self.double()
        g = gen("three")
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))

    def forward(self, x, use_fc3=True):
        h = self.fc2(torch.tanh(self.fc1(x)))
        return self.fc3(h) if use_fc3 else h


def sgd_momentum(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


class T11DistributedOptimizer(Case):
    def train(self, steps=2, passes=1, make_opt=sgd_momentum, set_to_none=False, **kwargs):
        model = make_model("opt")
        opt = hvd.DistributedOptimizer(make_opt(model.parameters()), named_parameters=model.named_parameters(),
                                       **kwargs)
        for step in range(steps):
            opt.zero_grad(set_to_none=set_to_none)
            for k in range(passes):
                loss_of(model, *batch(self.rank, step, k)).backward()
            opt.step()
        return model, opt

    def assertTrainedLike(self, model, reference_model, name, rtol=1e-9, atol=1e-12):
        torch.testing.assert_close(model_params(model), model_params(reference_model), rtol=rtol, atol=atol)
        rows = hvd.allgather(model_params(model).unsqueeze(0), name=name)
        for r in range(self.size):
            self.assertTrue(torch.equal(rows[r], rows[0]), f"rank {r}'s weights differ from rank 0's")

    def test_steps_match_single_process_on_averaged_gradients(self):
        model, opt = self.train()
        self.assertIsInstance(opt, torch.optim.SGD)
        self.assertEqual(type(opt).__name__, "SGD")
        self.assertTrainedLike(model, reference_training(make_model("opt"), sgd_momentum, 2), "opt.default")
        model, _ = self.train(make_opt=lambda p: torch.optim.Adam(p, lr=0.01))
        self.assertTrainedLike(model, reference_training(make_model("opt"), lambda p: torch.optim.Adam(p, lr=0.01),
                                                         2), "opt.adam")

    def test_buckets_follow_readiness_size_and_cycle_time(self):
        """Fusion by readiness: after the first step the buckets are rebuilt
        from rank 0's order of ready gradients (the same on every rank), cut
        by size (HOROVOD_FUSION_THRESHOLD) or by HOROVOD_CYCLE_TIME; the
        training is the same whatever the cut, and the exchange is timed."""
        reference = reference_training(make_model("opt"), sgd_momentum, 3)
        for threshold, cycle, name in (("150", "", "size"), ("", "100000", "cycle"), ("0", "", "off")):
            saved = {k: os.environ.get(k) for k in ("HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME")}
            os.environ["HOROVOD_FUSION_THRESHOLD"], os.environ["HOROVOD_CYCLE_TIME"] = threshold, cycle
            try:
                model, opt = self.train(steps=3)
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            self.assertTrainedLike(model, reference, f"opt.buckets.{name}")
            stats = opt.communication_stats()
            self.assertEqual(stats["steps"], 3, name)
            self.assertGreater(stats["exchange_s"], 0.0, name)
            self.assertGreaterEqual(stats["exchange_s"], stats["exposed_s"], name)
            self.assertTrue(0.0 <= stats["hidden_fraction"] <= 1.0, stats)
            buckets = self.assertEverywhere(sorted(len(g) for g in {id(g): g for g in opt._group_of.values()}.values()),
                                            f"opt.buckets.layout.{name}")[0]
            # A fused bucket's gradients stay views of one flat tensor, so the
            # steps after the first reduce it in place (ops._flat_span).
            from smb.torch.ops import _flat_span
            for group in {id(g): g for g in opt._group_of.values()}.values():
                self.assertIsNotNone(_flat_span([p.grad for p in group]), f"{name}: a bucket's gradients are apart")
            if name == "size":  # 150 bytes: the last layer's (16 + 96 B) together, the first's (48, 192 B) alone
                self.assertEqual(buckets, [1, 1, 2], name)  # the others go alone
            elif name == "cycle":  # 100 s: all 4 (352 bytes) in the 1 MiB first bucket
                self.assertEqual(buckets, [4], name)
            else:  # no fusion: every gradient alone
                self.assertEqual(buckets, [], name)

    def test_buckets_in_place_survive_new_gradient_tensors(self):
        """zero_grad(set_to_none=True) makes autograd hand over new gradient
        tensors every step: the bucket is gathered into a kept fusion buffer
        and no longer laid out flat (that copy would be wasted), and the
        training is the same."""
        reference = reference_training(make_model("opt"), sgd_momentum, 3)
        saved = os.environ.get("HOROVOD_CYCLE_TIME")
        os.environ["HOROVOD_CYCLE_TIME"] = "100000"  # one bucket of all 4
        try:
            model, opt = self.train(steps=3, set_to_none=True)
        finally:
            if saved is None:
                os.environ.pop("HOROVOD_CYCLE_TIME", None)
            else:
                os.environ["HOROVOD_CYCLE_TIME"] = saved
        self.assertTrainedLike(model, reference, "opt.buckets.set_to_none")
        self.assertTrue(opt._grads_dropped)

    def test_fusion_buffer_is_lent_again_every_step(self):
        """Tensors that do not lie in one storage are fused into a buffer of
        the pool, the same one each time (fresh pages every step cost more
        than the exchange), and the results stay right."""
        import contextlib
        from smb.torch import collectives
        lent = []
        borrow = collectives._pool.borrow

        @contextlib.contextmanager
        def spy(*args):
            with borrow(*args) as flat:
                lent.append(flat)  # held: a buffer freed and allocated anew cannot come back at the same address
                yield flat

        collectives._pool.borrow = spy
        try:
            ts = [torch.zeros(n) for n in (1000, 3000, 500)]
            for step in range(3):
                for t in ts:
                    t.fill_(float(self.rank + 1 + step))
                hvd.grouped_allreduce_(ts, op=hvd.Sum, name="pool")
                want = float(sum(r + 1 + step for r in range(self.size)))
                for t in ts:
                    self.assertTrue(torch.equal(t, torch.full_like(t, want)), f"step {step}: {t[:3]}")
        finally:
            del collectives._pool.borrow
        self.assertEqual(len(lent), 3)
        self.assertEqual(len({f.data_ptr() for f in lent}), 1, "one buffer, lent again every step")

    def test_fusion_cuts_by_size_first_bucket_and_cycle(self):
        from smb.torch.optimizer import _fusion_buckets
        ts = [torch.zeros(n) for n in (10, 10, 10, 40, 10, 10)]  # 40-byte and 160-byte tensors
        sizes = lambda buckets: [[t.numel() for t in b] for b in buckets or []]
        # A small first bucket (80 B), then 200 B ones; one-tensor buckets are left out.
        self.assertEqual(sizes(_fusion_buckets(ts, 80, 200)), [[10, 10], [10, 40], [10, 10]])
        # Readiness 0, 1, 2, 10, 11, 12 ms with a 5 ms cycle: cut where a gradient came late.
        times = dict(zip(ts, (0.000, 0.001, 0.002, 0.010, 0.011, 0.012)))
        self.assertEqual(sizes(_fusion_buckets(ts, 1 << 20, 1 << 20, times=times, cycle=0.005)),
                         [[10, 10, 10], [40, 10, 10]])
        self.assertIsNone(_fusion_buckets(ts, 0, 0))


    def test_default_names(self):
        model = make_model("opt")
        opt = hvd.DistributedOptimizer(torch.optim.SGD([{"params": list(model.parameters())[:2]},
                                                        {"params": list(model.parameters())[2:], "lr": 0.05}],
                                                       lr=0.1))
        for step in range(2):
            opt.zero_grad()
            loss_of(model, *batch(self.rank, step)).backward()
            opt.step()
        # The single-process reference, with the same two parameter groups.
        ref = make_model("opt")
        ref_params = list(ref.parameters())
        ref_opt = torch.optim.SGD([{"params": ref_params[:2]}, {"params": ref_params[2:], "lr": 0.05}], lr=0.1)
        for step in range(2):
            total = [torch.zeros_like(p) for p in ref_params]
            for r in range(self.size):
                ref.zero_grad()
                loss_of(ref, *batch(r, step)).backward()
                for acc, p in zip(total, ref_params):
                    acc += p.grad
            for acc, p in zip(total, ref_params):
                p.grad = acc / self.size
            ref_opt.step()
        self.assertTrainedLike(model, ref, "opt.noname")

    def test_backward_passes_per_step(self):
        model, _ = self.train(passes=2, backward_passes_per_step=2)
        self.assertTrainedLike(model, reference_training(make_model("opt"), sgd_momentum, 2, passes=2), "opt.bpps")
        # A third pass before step(): the hook refuses.
        model = make_model("opt")
        opt = hvd.DistributedOptimizer(sgd_momentum(model.parameters()), named_parameters=model.named_parameters())
        loss_of(model, *batch(self.rank, 0)).backward()
        with self.assertRaises(AssertionError):
            loss_of(model, *batch(self.rank, 1)).backward()
        opt.synchronize()
        opt.zero_grad()

    def test_predivide_sum_groups_and_compression(self):
        model, _ = self.train(gradient_predivide_factor=2.0)
        reference = reference_training(make_model("opt"), sgd_momentum, 2)
        self.assertTrainedLike(model, reference, "opt.predivide")
        model, _ = self.train(op=hvd.Sum)
        self.assertTrainedLike(model, reference_training(make_model("opt"), sgd_momentum, 2, op=hvd.Sum), "opt.sum")
        model, _ = self.train(groups=2)
        self.assertTrainedLike(model, reference, "opt.groups2")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model, _ = self.train(num_groups=2)  # deprecated spelling of groups=2
        self.assertTrue(any(issubclass(w.category, DeprecationWarning) for w in caught))
        self.assertTrainedLike(model, reference, "opt.num_groups")
        model = make_model("opt")
        params = dict(model.named_parameters())
        opt = hvd.DistributedOptimizer(sgd_momentum(model.parameters()), named_parameters=model.named_parameters(),
                                       groups=[[params["0.weight"], params["2.weight"]]])
        for step in range(2):
            opt.zero_grad()
            loss_of(model, *batch(self.rank, step)).backward()
            opt.step()
        self.assertTrainedLike(model, reference, "opt.groups_list")
        for compression in (hvd.Compression.fp16, hvd.Compression.bf16):
            model, _ = self.train(compression=compression)
            self.assertTrainedLike(model, reference, f"opt.{compression.__name__}", rtol=2e-2, atol=2e-2)

    def test_set_backward_passes_and_frozen_parameters(self):
        """set_backward_passes_per_step(2) after construction; a parameter
        frozen at construction is never reduced and keeps grad None."""
        model = make_model("opt")
        frozen = model[2].bias
        frozen.requires_grad_(False)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
        opt.set_backward_passes_per_step(2)
        for step in range(2):
            opt.zero_grad()
            for k in range(2):
                loss_of(model, *batch(self.rank, step, k)).backward()
            opt.step()
        self.assertIsNone(frozen.grad)
        ref = make_model("opt")
        ref[2].bias.requires_grad_(False)
        ref = reference_training(ref, lambda p: torch.optim.SGD(p, lr=0.1), 2, passes=2)
        self.assertTrainedLike(model, ref, "opt.frozen")
        self.assertTrue(torch.equal(frozen, make_model("opt")[2].bias))

    def test_sparse_gradients(self):
        """Embedding(sparse=True): every rank looks up a different number of
        rows; sparse allreduce and sparse_as_dense give the averaged step."""
        def embedding():
            e = torch.nn.Embedding(6, 2, sparse=True).double()
            with torch.no_grad():
                e.weight.copy_(torch.randn(6, 2, generator=gen("embedding"), dtype=torch.float64))
            return e

        def lookup(r):
            return torch.randint(0, 6, (2 + r,), generator=gen("lookup", r))

        ref = embedding()
        grads = []
        for r in range(self.size):
            ref.zero_grad()
            (ref(lookup(r)) ** 2).sum().backward()
            grads.append(ref.weight.grad.to_dense())
        expected = embedding().weight.detach() - 0.5 * sum(grads) / self.size
        for sparse_as_dense in (False, True):
            e = embedding()
            opt = hvd.DistributedOptimizer(torch.optim.SGD(e.parameters(), lr=0.5),
                                           named_parameters=[(f"emb.{sparse_as_dense}", e.weight)],
                                           sparse_as_dense=sparse_as_dense)
            (e(lookup(self.rank)) ** 2).sum().backward()
            opt.step()
            torch.testing.assert_close(e.weight.detach(), expected, msg=f"sparse_as_dense={sparse_as_dense}")
            self.assertTrue(e.weight.grad.is_sparse, "the reduced gradient keeps p.grad's sparse layout")

    def test_sparse_adam(self):
        """SparseAdam takes only sparse gradients: they stay sparse through
        the reduction, also under sparse_as_dense (as in Horovod)."""
        for sparse_as_dense in (False, True):
            e = torch.nn.Embedding(10, 3, sparse=True)
            before = e.weight.detach().clone()
            opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(e.parameters()), lr=0.1),
                                           named_parameters=[(f"adam.{sparse_as_dense}", e.weight)],
                                           sparse_as_dense=sparse_as_dense)
            e(torch.tensor([1, 4, 4 + self.rank])).sum().backward()
            opt.step()
            moved = (e.weight.detach() != before).any(dim=1).nonzero().flatten().tolist()
            self.assertEqual(moved, sorted({1, 4} | {4 + r for r in range(self.size)}))

    def test_unused_layer_on_one_rank(self):
        """Rank 0 never uses fc3: step() does not hang, and fc3 moves by the
        others' gradients averaged with rank 0's zeros."""
        model = ThreeLayers()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
        x, y = batch(self.rank, 0)
        loss_of(lambda v: model(v, use_fc3=self.rank != 0), x, y).backward()
        opt.step()
        ref = ThreeLayers()
        total = {n: torch.zeros_like(p) for n, p in ref.named_parameters()}
        for r in range(self.size):
            ref.zero_grad()
            loss_of(lambda v: ref(v, use_fc3=r != 0), *batch(r, 0)).backward()
            for n, p in ref.named_parameters():
                if p.grad is not None:
                    total[n] += p.grad
        with torch.no_grad():
            for n, p in ref.named_parameters():
                p -= 0.1 * total[n] / self.size
        self.assertTrainedLike(model, ref, "opt.unused")

    def test_named_parameters_and_argument_errors(self):
        model = make_model("errors")
        params = list(model.named_parameters())

        def make(**kwargs):
            return hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), **kwargs)

        with self.assertRaises(ValueError):  # duplicate names
            make(named_parameters=[("w", p) for _, p in params])
        with self.assertRaises(ValueError):  # some parameters unnamed
            make(named_parameters=params[:1])
        with self.assertRaises(ValueError):  # not (name, parameter) tuples
            make(named_parameters=[p for _, p in params])
        with self.assertRaises(ValueError):
            make(named_parameters=params, backward_passes_per_step=0)
        with self.assertRaises(ValueError):
            make(named_parameters=params, op=hvd.Sum, gradient_predivide_factor=2.0)
        with self.assertRaises(ValueError):
            make(named_parameters=params, groups=0)
        with self.assertRaises(ValueError):
            make(named_parameters=params, groups=[["not a tensor"]])
        with self.assertRaises(ValueError):
            make(named_parameters=params, groups=[[params[0][1], params[0][1]]])

    def test_synchronize_skip_synchronize_and_warning(self):
        model = make_model("opt")
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
        loss_of(model, *batch(self.rank, 0)).backward()
        opt.synchronize()
        unclipped = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).norm()
        torch.nn.utils.clip_grad_norm_(model.parameters(), float(unclipped) / 2)
        clipped = [p.grad.clone() for p in model.parameters()]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with opt.skip_synchronize():
                opt.step()
        self.assertEqual([str(w.message) for w in caught], [])
        ref = make_model("opt")
        with torch.no_grad():
            for p, g in zip(ref.parameters(), clipped):
                p -= 0.1 * g
        self.assertTrainedLike(model, ref, "opt.clipped")
        # step() right after synchronize(), without skip_synchronize(): exactly one warning.
        opt.zero_grad()
        loss_of(model, *batch(self.rank, 1)).backward()
        opt.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            opt.step()
        self.assertEqual(len(caught), 1, [str(w.message) for w in caught])
        self.assertIn("optimizer.step() called without optimizer.skip_synchronize()", str(caught[0].message))

    def test_load_state_dict(self):
        """load_state_dict() between steps: training goes on, the same everywhere."""
        model, opt = self.train(steps=1)
        opt.load_state_dict(copy.deepcopy(opt.state_dict()))
        opt.zero_grad()
        loss_of(model, *batch(self.rank, 1)).backward()
        opt.step()
        self.assertTrainedLike(model, reference_training(make_model("opt"), sgd_momentum, 2), "opt.load_state_dict")

    def test_zero_grad_with_pending_allreduces(self):
        model = make_model("opt")
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
        loss_of(model, *batch(self.rank, 0)).backward()
        with self.assertRaises(AssertionError):
            opt.zero_grad()
        opt.step()
        opt.zero_grad()  # nothing pending now
        self.assertTrainedLike(model, reference_training(make_model("opt"), lambda p: torch.optim.SGD(p, lr=0.1), 1),
                               "opt.zero_grad")


# ---------------------------------------------------------------- compression


class T12Compression(Case):
    def test_round_trips(self):
        for compression, wire in ((hvd.Compression.fp16, torch.float16), (hvd.Compression.bf16, torch.bfloat16)):
            for dtype in (torch.float32, torch.float64, torch.float16):
                t = torch.tensor([1.5, -2.25, 3.0], dtype=dtype)
                compressed, ctx = compression.compress(t)
                self.assertEqual(compressed.dtype, wire)
                back = compression.decompress(compressed, ctx)
                self.assertEqual(back.dtype, dtype)
                self.assertTrue(torch.equal(back, t))
            for dtype in INTS:
                t = torch.arange(4).to(dtype)
                compressed, ctx = compression.compress(t)
                self.assertIs(compressed, t)
                self.assertIs(compression.decompress(compressed, ctx), t)
        t = torch.ones(2)
        self.assertEqual(hvd.Compression.none.compress(t), (t, None))
        self.assertIs(hvd.Compression.none.decompress(t, None), t)
        self.assertTrue(issubclass(hvd.Compression.fp16, hvd.compression.Compressor))

    def test_allreduce_with_compression(self):
        for compression in (hvd.Compression.fp16, hvd.Compression.bf16):
            for dtype in (torch.float32, torch.float64):
                data = all_ranks((3, 2), dtype, "compress", compression.__name__, dtype)
                out = hvd.allreduce(data[self.rank], name=f"compress.{compression.__name__}.{dname(dtype)}",
                                    compression=compression, op=hvd.Sum)
                self.assertSameTensor(out, reference(data, hvd.Sum))
            data = all_ranks((self.size, 2), torch.float32, "compress.rs")
            out = hvd.reducescatter(data[self.rank], compression=compression, op=hvd.Sum,
                                    name=f"compress.rs.{compression.__name__}")
            self.assertSameTensor(out, reference(data, hvd.Sum)[self.rank:self.rank + 1])
            out = hvd.grouped_allreduce([data[self.rank], data[self.rank].double()], compression=compression,
                                        op=hvd.Sum, name=f"compress.g.{compression.__name__}")
            self.assertEqual([o.dtype for o in out], [torch.float32, torch.float64])


# ---------------------------------------------------------------- SyncBatchNorm


class T13SyncBatchNorm(Case):
    def check(self, shape_tail, counts, tag):
        channels = 3
        g = gen("sbn", tag)
        parts = [torch.randn((n, channels) + shape_tail, generator=g) * 2 + 1 for n in counts]
        grads = [torch.randn((n, channels) + shape_tail, generator=g) for n in counts]
        weight, bias = torch.randn(channels, generator=g), torch.randn(channels, generator=g)
        bn = torch.nn.BatchNorm1d(channels)
        sbn = hvd.SyncBatchNorm(channels)
        with torch.no_grad():
            for m in (bn, sbn):
                m.weight.copy_(weight)
                m.bias.copy_(bias)
        full = torch.cat(parts).requires_grad_()
        out_full = bn(full)
        out_full.backward(torch.cat(grads))
        x = parts[self.rank].clone().requires_grad_()
        out = sbn(x)
        first = sum(counts[:self.rank])
        rows = slice(first, first + counts[self.rank])
        torch.testing.assert_close(out, out_full.detach()[rows], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(sbn.running_mean, bn.running_mean, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(sbn.running_var, bn.running_var, rtol=1e-4, atol=1e-5)
        self.assertEqual(int(sbn.num_batches_tracked), 1)
        out.backward(grads[self.rank])
        torch.testing.assert_close(x.grad, full.grad[rows], rtol=1e-4, atol=1e-5)
        # weight and bias gradients are local: their sum is the whole batch's.
        torch.testing.assert_close(hvd.allreduce(sbn.weight.grad, op=hvd.Sum, name="sbn.wgrad"), bn.weight.grad,
                                   rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(hvd.allreduce(sbn.bias.grad, op=hvd.Sum, name="sbn.bgrad"), bn.bias.grad,
                                   rtol=1e-4, atol=1e-5)
        # Evaluation uses the running statistics, locally.
        sbn.eval()
        bn.eval()
        torch.testing.assert_close(sbn(parts[self.rank]), bn(parts[self.rank]), rtol=1e-4, atol=1e-5)

    def test_against_batchnorm_on_concatenated_batch(self):
        self.check((), [2 + r for r in range(self.size)], "2d")
        self.check((4,), [1 + (r % 2) for r in range(self.size)], "3d")

    def test_averaged_gradients_with_mean_loss(self):
        """Equal batches, loss mean(dim=0).sum() on each rank: allreduce(Average)
        of the gradients equals BatchNorm1d's on the concatenated batch."""
        channels, n = 4, 3
        g = gen("sbn.avg")
        parts = [torch.randn(n, channels, generator=g) for _ in range(self.size)]
        bn, sbn = torch.nn.BatchNorm1d(channels), hvd.SyncBatchNorm(channels)
        full = torch.cat(parts).requires_grad_()
        bn(full).mean(dim=0).sum().backward()
        x = parts[self.rank].clone().requires_grad_()
        sbn(x).mean(dim=0).sum().backward()
        for local, expected, what in ((sbn.weight.grad, bn.weight.grad, "weight"),
                                      (sbn.bias.grad, bn.bias.grad, "bias")):
            averaged = hvd.allreduce(local, op=hvd.Average, name=f"sbn.avg.{what}")
            torch.testing.assert_close(averaged, expected, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(x.grad * self.size, full.grad[self.rank * n:(self.rank + 1) * n], rtol=1e-4,
                                   atol=1e-5)
        with self.assertRaises(ValueError):
            sbn(torch.ones(3))


# ---------------------------------------------------------------- process sets


class T14ProcessSets(Case):
    def setUp(self):
        super().setUp()
        self.even = hvd.add_process_set(list(range(0, self.size, 2)))
        self.odd = hvd.add_process_set(hvd.ProcessSet(range(1, self.size, 2))) if self.size > 1 else None
        self.mine = self.even if self.rank % 2 == 0 else self.odd
        self.other = self.odd if self.rank % 2 == 0 else self.even

    def tearDown(self):
        for ps in (self.even, self.odd):
            if ps is not None and ps.process_set_id is not None:
                self.assertTrue(hvd.remove_process_set(ps))
        super().tearDown()

    def test_registration(self):
        self.assertEqual(hvd.global_process_set.process_set_id, 0)
        self.assertEqual(hvd.global_process_set.ranks, list(range(self.size)))
        self.assertEqual(self.even.ranks, list(range(0, self.size, 2)))
        self.assertEqual(self.even.size(), len(self.even.ranks))
        self.assertEqual(self.mine.rank(), self.rank // 2)
        self.assertTrue(self.mine.included())
        self.assertIn("ProcessSet(process_set_id=", str(self.even))
        self.assertEqual(hvd.ProcessSet([3, 1, 2]).ranks, [1, 2, 3])
        self.assertIsNone(hvd.ProcessSet([0]).size())
        self.assertIsNone(hvd.ProcessSet([0]).rank())
        with self.assertRaises(ValueError):
            hvd.ProcessSet(["a"])
        if self.other is not None:
            self.assertFalse(self.other.included())
            with self.assertRaises(ValueError):
                self.other.rank()
            self.assertEqual(self.other.size(), len(self.other.ranks))
        ids = [self.even.process_set_id] + ([self.odd.process_set_id] if self.odd else [])
        self.assertEqual(len(set(ids)), len(ids))
        self.assertNotIn(0, ids)
        with self.assertRaises(ValueError):  # the same ranks again
            hvd.add_process_set(list(range(0, self.size, 2)))
        if self.size > 1:
            with self.assertRaises(ValueError):  # the global set's ranks
                hvd.add_process_set(list(range(self.size)))
        for bad in ([self.size], [-1], []):
            with self.assertRaises(ValueError, msg=str(bad)):
                hvd.add_process_set(bad)
        self.assertFalse(hvd.remove_process_set(hvd.global_process_set))
        self.assertFalse(hvd.remove_process_set(hvd.ProcessSet([0])))
        # A freed id is reused first.
        freed = self.even.process_set_id
        self.assertTrue(hvd.remove_process_set(self.even))
        self.assertIsNone(self.even.process_set_id)
        self.assertIsNone(self.even.size())
        self.even = hvd.add_process_set([0])
        self.assertEqual(self.even.process_set_id, freed)
        self.assertEqual(hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=self.even,
                                       name="ps.reused").tolist() if self.rank == 0 else [1.0], [1.0])
        if self.rank != 0:
            with self.assertRaises(ValueError):
                hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=self.even, name="ps.reused")
        # Without HOROVOD_DYNAMIC_PROCESS_SETS: no changes after init.
        saved = os.environ.pop("HOROVOD_DYNAMIC_PROCESS_SETS")
        try:
            with self.assertRaises(ValueError):
                hvd.add_process_set([0] if self.size > 1 else [])
            with self.assertRaises(ValueError):
                hvd.remove_process_set(self.even)
        finally:
            os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = saved
        self.assertEqual(self.even.process_set_id, freed)

    def test_collectives_in_sets(self):
        ps, members = self.mine, self.mine.ranks
        n = len(members)
        x = torch.full((3,), float(self.rank + 1))
        expected_sum = float(sum(r + 1 for r in members))
        self.assertTrue(torch.equal(hvd.allreduce(x, op=hvd.Sum, process_set=ps, name="ps.ar"),
                                    torch.full((3,), expected_sum)))
        torch.testing.assert_close(hvd.allreduce(x, process_set=ps, name="ps.avg"), torch.full((3,), expected_sum / n))
        out = hvd.grouped_allreduce([x, x.double()], op=hvd.Sum, process_set=ps, name="ps.gar")
        self.assertTrue(torch.equal(out[1], torch.full((3,), expected_sum, dtype=torch.float64)))
        gathered = hvd.allgather(torch.full((1, 2), float(self.rank)), process_set=ps, name="ps.ag")
        self.assertEqual(gathered[:, 0].tolist(), [float(r) for r in members])
        root = members[-1]  # a global rank
        self.assertTrue(torch.equal(hvd.broadcast(x, root, process_set=ps, name="ps.bc"), torch.full((3,), root + 1.)))
        a2a = hvd.alltoall(torch.full((n, 1), float(self.rank)), process_set=ps, name="ps.a2a")
        self.assertEqual(a2a[:, 0].tolist(), [float(r) for r in members])
        rs = hvd.reducescatter(torch.ones(2 * n, 2), op=hvd.Sum, process_set=ps, name="ps.rs")
        self.assertTrue(torch.equal(rs, torch.full((2, 2), float(n))))
        hvd.barrier(process_set=ps)
        y = torch.ones(2, requires_grad=True)
        hvd.allreduce(y, op=hvd.Sum, process_set=ps).backward(torch.ones(2))
        self.assertTrue(torch.equal(y.grad, torch.full((2,), float(n))))
        # broadcast_object: two broadcasts on members, one failing call on the others each.
        got = hvd.broadcast_object({"from": self.rank}, root_rank=members[0], process_set=ps)
        self.assertEqual(got, {"from": members[0]})
        if self.other is not None:
            other = self.other
            calls = [
                lambda: hvd.allreduce(x, process_set=other, name="ps.ar"),
                lambda: hvd.allreduce_async_(x.clone(), process_set=other, name="ps.ar"),
                lambda: hvd.grouped_allreduce([x], process_set=other, name="ps.gar"),
                lambda: hvd.allgather(x.view(3, 1), process_set=other, name="ps.ag"),
                lambda: hvd.broadcast(x, other.ranks[0], process_set=other, name="ps.bc"),
                lambda: hvd.alltoall(torch.ones(len(other.ranks)), process_set=other, name="ps.a2a"),
                lambda: hvd.reducescatter(torch.ones(len(other.ranks), 1), process_set=other, name="ps.rs"),
                lambda: hvd.barrier(process_set=other),
                lambda: hvd.broadcast_(x, root, process_set=other),  # root not in `other`
                lambda: hvd.broadcast_object(1, root_rank=other.ranks[0], process_set=other),
                lambda: hvd.broadcast_object(1, root_rank=other.ranks[0], process_set=other),
            ]
            for i, call in enumerate(calls):
                with self.assertRaises(ValueError, msg=f"call {i}"):
                    call()
        self.assertCollectivesWork("process_sets")

    def test_optimizer_in_a_set(self):
        """DistributedOptimizer(process_set=even): the even ranks average among
        themselves; the odd ranks step alone."""
        model = make_model("opt")
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters(), process_set=self.even)
        for step in range(2):
            opt.zero_grad()
            loss_of(model, *batch(self.rank, step)).backward()
            opt.step()
        ranks = self.even.ranks if self.rank % 2 == 0 else [self.rank]
        reference = reference_training(make_model("opt"), lambda p: torch.optim.SGD(p, lr=0.1), 2, ranks=ranks)
        torch.testing.assert_close(model_params(model), model_params(reference), rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------- timeline


class T15Timeline(Case):
    def test_timeline(self):
        directory = tempfile.mkdtemp(prefix="smb-torch-timeline-")
        path = os.path.join(directory, "timeline.json")
        try:
            hvd.start_timeline(path)
            hvd.start_timeline(path)  # the current file again: a no-op
            hvd.allreduce(torch.ones(4), name="timeline_probe")
            if self.rank == 0:
                with open(path) as f:
                    json.load(f)  # valid while it is being written
            hvd.allgather(torch.ones(2, 1), name="timeline_gather")
            hvd.stop_timeline()
            hvd.stop_timeline()  # stopped already: a no-op
            hvd.allreduce(torch.ones(4), name="timeline_after")
            if self.rank == 0:
                with open(path) as f:
                    events = json.load(f)
                self.assertIsInstance(events, list)
                names = {e["args"]["name"]: e["pid"] for e in events
                         if e.get("ph") == "M" and e.get("name") == "process_name" and "name" in e.get("args", {})}
                self.assertIn("allreduce.timeline_probe", names)
                self.assertIn("allgather.timeline_gather", names)
                self.assertNotIn("allreduce.timeline_after", names)
                self.assertTrue(any("start_time_since_epoch_in_micros" in e.get("args", {}) for e in events))
                pid = names["allreduce.timeline_probe"]
                phases = [e.get("name") for e in events if e.get("pid") == pid and e.get("ph") == "B"]
                self.assertIn("NEGOTIATE_ALLREDUCE", phases)
                self.assertIn("ALLREDUCE", phases)
                begins = sum(1 for e in events if e.get("pid") == pid and e.get("ph") == "B")
                ends = sum(1 for e in events if e.get("pid") == pid and e.get("ph") == "E")
                self.assertEqual(begins, ends)
                for e in events:
                    if e.get("ph") in ("B", "E"):
                        self.assertIsInstance(e["ts"], int)
            else:
                self.assertFalse(os.path.exists(path))  # rank 0 only
            hvd.barrier()
        finally:
            shutil.rmtree(directory, ignore_errors=True)


# ---------------------------------------------------------------- lifecycle (last: shutdown and init again)


class T16Lifecycle(Case):
    def test_1_init_with_process_sets(self):
        size = self.size
        hvd.shutdown()
        sets = [hvd.ProcessSet([0]), hvd.ProcessSet(range(1, size)), hvd.ProcessSet(reversed(range(size))),
                hvd.ProcessSet([0])]
        if size == 1:
            sets = [hvd.ProcessSet([0]), hvd.ProcessSet([0])]
        with self.assertRaises(ValueError):
            hvd.init(process_sets=sets)
        self.assertTrue(hvd.is_initialized())
        for ps in sets:
            self.assertIsNone(ps.process_set_id)
        first, rest = hvd.ProcessSet([0]), hvd.ProcessSet(range(1, max(size, 2)) if size > 1 else [0])
        valid = [first, rest] if size > 1 else [first]
        hvd.init(process_sets=valid)
        self.assertEqual([ps.process_set_id for ps in valid], list(range(1, len(valid) + 1)))
        mine = first if self.rank == 0 else rest
        out = hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=mine, name="init_sets")
        self.assertTrue(torch.equal(out, torch.full((2,), float(len(mine.ranks)))))
        for ps in valid:
            self.assertTrue(hvd.remove_process_set(ps))
        hvd.shutdown()
        hvd.init()

    def test_2_shutdown_and_init_again(self):
        rank, size = self.rank, self.size
        hvd.shutdown()
        self.assertFalse(hvd.is_initialized())
        hvd.shutdown()  # twice: a no-op
        for query in (hvd.rank, hvd.size, hvd.local_rank, hvd.local_size, hvd.cross_rank, hvd.cross_size):
            with self.assertRaises(ValueError, msg=query.__name__):
                query()
        with self.assertRaises(ValueError):
            hvd.start_timeline("/nonexistent/timeline.json")
        with self.assertRaises(ValueError):
            hvd.add_process_set([0])
        # A collective before init: HorovodInternalError (as Horovod's failed enqueue).
        with self.assertRaises(hvd.HorovodInternalError):
            hvd.allreduce(torch.ones(1))
        with self.assertRaises(hvd.HorovodInternalError):
            hvd.allgather_async(torch.ones(1, 1))
        hvd.init()
        self.assertTrue(hvd.is_initialized())
        self.assertEqual((hvd.rank(), hvd.size()), (rank, size))
        # Unnamed collectives match again from a fresh counter.
        self.assertTrue(torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(size))))
        hvd.init()  # again: a no-op
        self.assertEqual(hvd.allgather_object(rank, name="reinit"), list(range(size)))

    def test_3_stall_warning(self):
        """HOROVOD_STALL_CHECK_TIME_SECONDS=1 and rank 1 five seconds late:
        the waiting ranks log the warning naming rank 1 and the collective."""
        if self.size < 2:
            self.skipTest("needs 2 ranks")
        hvd.shutdown()
        os.environ["HOROVOD_STALL_CHECK_TIME_SECONDS"] = "1"
        capture = Capture()
        logger = logging.getLogger("smb.torch")
        logger.addHandler(capture)
        try:
            hvd.init()
            hvd.barrier()
            if self.rank == 1:
                time.sleep(5.0)  # generous: a starved waiting thread still sees it
            out = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="stall_probe")
            self.assertTrue(torch.equal(out, torch.full((2,), float(self.size))))
        finally:
            logger.removeHandler(capture)
            del os.environ["HOROVOD_STALL_CHECK_TIME_SECONDS"]
        warnings_logged = [r.getMessage() for r in capture.records if r.levelno == logging.WARNING]
        if self.rank != 1:
            stall = [m for m in warnings_logged if "Missing ranks" in m]
            self.assertTrue(stall, f"no stall warning among {warnings_logged}")
            self.assertIn("1: [allreduce.stall_probe]", stall[0])
            self.assertIn("waiting for remainder of ranks", stall[0])
        hvd.shutdown()
        hvd.init()
        self.assertCollectivesWork("after_stall")

    def test_4_stall_check_disabled_and_shutdown_time(self):
        """HOROVOD_STALL_CHECK_DISABLE=1: no warning for a late rank. A stall
        shutdown time below the check time: a warning at init, and no shutdown."""
        if self.size < 2:
            self.skipTest("needs 2 ranks")
        hvd.shutdown()
        variables = {"HOROVOD_STALL_CHECK_TIME_SECONDS": "1", "HOROVOD_STALL_CHECK_DISABLE": "1",
                     "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "0.5"}
        os.environ.update(variables)
        capture = Capture()
        logger = logging.getLogger("smb.torch")
        logger.addHandler(capture)
        try:
            hvd.init()
            hvd.barrier()
            if self.rank == 1:
                time.sleep(2.5)
            out = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="stall_disabled")
            self.assertTrue(torch.equal(out, torch.full((2,), float(self.size))))
        finally:
            logger.removeHandler(capture)
            for name in variables:
                del os.environ[name]
        messages = [r.getMessage() for r in capture.records if r.levelno >= logging.WARNING]
        self.assertFalse([m for m in messages if "Missing ranks" in m], messages)
        self.assertTrue([m for m in messages if "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS is less than" in m], messages)
        hvd.shutdown()
        hvd.init()
        self.assertCollectivesWork("after_stall_disabled")

    def test_5_timeline_from_environment(self):
        """HOROVOD_TIMELINE=<file> at init: rank 0 writes it until shutdown."""
        made = tempfile.mkdtemp(prefix="smb-torch-timeline-env-") if self.rank == 0 else None
        directory = hvd.broadcast_object(made, root_rank=0, name="timeline_dir")
        path = os.path.join(directory, "env.json")
        hvd.shutdown()
        saved = os.environ.get("HOROVOD_TIMELINE")
        os.environ["HOROVOD_TIMELINE"] = path
        try:
            hvd.init()
            hvd.allreduce(torch.ones(2), name="timeline_env")
            hvd.shutdown()
        finally:
            os.environ["HOROVOD_TIMELINE"] = saved
        hvd.init()
        try:
            if self.rank == 0:
                with open(path) as f:
                    events = json.load(f)
                self.assertIn("allreduce.timeline_env", {e.get("args", {}).get("name") for e in events})
            hvd.barrier()
        finally:
            if self.rank == 0:
                shutil.rmtree(directory, ignore_errors=True)


CASES = [T01Basics, T02Allreduce, T03Allgather, T04Broadcast, T05Alltoall, T06Reducescatter, T07BarrierJoin,
         T08Autograd, T09Errors, T10Functions, T11DistributedOptimizer, T12Compression, T13SyncBatchNorm,
         T14ProcessSets, T15Timeline, T16Lifecycle]


# ---------------------------------------------------------------- runner


class FailFastResult(unittest.TextTestResult):
    """The first failure or error ends this process (status 1) after
    printing it: the launcher then stops every other rank."""

    def _fail(self, test, kind):
        self.stream.flush()
        rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "?"))
        _, trace = (self.errors if kind == "ERROR" else self.failures)[-1]
        sys.stdout.flush()
        sys.stderr.write(f"\n[rank {rank}] {kind}: {test}\n{trace}\n")
        sys.stderr.flush()
        os._exit(1)

    def addError(self, test, err):
        super().addError(test, err)
        self._fail(test, "ERROR")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._fail(test, "FAIL")


def main(argv):
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="name each test (rank 0)")
    parser.add_argument("-k", dest="patterns", action="append", default=[],
                        help="only tests whose name contains this (repeatable; the same on every rank!)")
    args = parser.parse_args(argv)
    hvd.init()
    rank = hvd.rank()
    loader = unittest.TestLoader()
    if args.patterns:
        loader.testNamePatterns = [f"*{p}*" for p in args.patterns]
    suite = unittest.TestSuite(loader.loadTestsFromTestCase(case) for case in CASES)
    stream = sys.stderr if rank == 0 else open(os.devnull, "w")
    runner = unittest.TextTestRunner(stream=stream, verbosity=2 if args.verbose and rank == 0 else 1,
                                     resultclass=FailFastResult)
    started = time.monotonic()
    result = runner.run(suite)
    ok = result.wasSuccessful()
    hvd.shutdown()
    if rank == 0:
        print(f"smb.torch API tests: {result.testsRun} run, {len(result.skipped)} skipped in "
              f"{time.monotonic() - started:.1f} s: {'OK' if ok else 'FAILED'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
