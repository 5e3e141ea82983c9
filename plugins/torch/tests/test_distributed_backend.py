#!/usr/bin/python3
"""The torch.distributed backend "smb", inside every worker of a job
(smbrun -np 3, which sets MASTER_ADDR/MASTER_PORT as torchrun does):
every supported collective with values whose results are exact, async
work, a subgroup, errors for what is not supported, and DDP over "smb"
giving the same gradients as DDP over gloo in the same processes."""

import os
import sys
import traceback

import torch
import torch.distributed as dist

import smb.torch  # noqa: F401 - registers the backend

FAILURES = []


def check(name, fn):
    try:
        fn()
        print(f"[rank {dist.get_rank()}] {name}: ok", flush=True)
    except Exception:  # noqa: BLE001 - reported, then the job fails
        FAILURES.append(name)
        print(f"[rank {dist.get_rank()}] {name}: FAILED\n{traceback.format_exc()}", flush=True)


def expect_equal(got, want):
    if not torch.equal(got, want):
        raise AssertionError(f"got {got}, want {want}")


def all_reduce(r, n):
    total = n * (n + 1) // 2
    for dtype in (torch.float32, torch.float64, torch.int32, torch.int64, torch.bfloat16):
        t = torch.full((5,), r + 1, dtype=dtype)
        dist.all_reduce(t)
        expect_equal(t, torch.full((5,), total, dtype=dtype))
    for op, want in ((dist.ReduceOp.MIN, 1), (dist.ReduceOp.MAX, n), (dist.ReduceOp.PRODUCT, 6 if n == 3 else 2)):
        t = torch.full((3, 2), float(r + 1))
        dist.all_reduce(t, op=op)
        expect_equal(t, torch.full((3, 2), float(want)))
    t = torch.full((4,), float(2 * (r + 1)))
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    expect_equal(t, torch.full((4,), float(n + 1)))
    view = torch.zeros(4, 4)[:, 1]  # not contiguous: the result must land in the view
    view.fill_(r)
    dist.all_reduce(view)
    expect_equal(view, torch.full((4,), float(n * (n - 1) // 2)))


def broadcast(r, n):
    for root in range(n):
        t = torch.arange(6, dtype=torch.int64) * (r + 10)
        dist.broadcast(t, src=root)
        expect_equal(t, torch.arange(6, dtype=torch.int64) * (root + 10))


def all_gather(r, n):
    outs = [torch.empty(2, 3) for _ in range(n)]
    dist.all_gather(outs, torch.full((2, 3), float(r)))
    for i, o in enumerate(outs):
        expect_equal(o, torch.full((2, 3), float(i)))
    out = torch.empty(n * 2, dtype=torch.int32)
    dist.all_gather_into_tensor(out, torch.tensor([r, -r], dtype=torch.int32))
    expect_equal(out, torch.tensor([v for i in range(n) for v in (i, -i)], dtype=torch.int32))


def reduce_scatter(r, n):
    out = torch.empty(3)
    dist.reduce_scatter(out, [torch.full((3,), float((r + 1) * (i + 1))) for i in range(n)])
    r_sum = n * (n + 1) // 2
    expect_equal(out, torch.full((3,), float(r_sum * (r + 1))))
    out = torch.empty(2)
    dist.reduce_scatter_tensor(out, torch.arange(2 * n, dtype=torch.float32) + r)
    expect_equal(out, (torch.arange(2 * r, 2 * r + 2, dtype=torch.float32) * n) + r_sum - n)


def all_to_all(r, n):
    # Rank r sends i + 1 rows to rank i, each row holding 100 * r + i.
    splits = [i + 1 for i in range(n)]
    send = torch.cat([torch.full((i + 1, 2), float(100 * r + i)) for i in range(n)])
    recv = torch.empty(n * (r + 1), 2)
    dist.all_to_all_single(recv, send, output_split_sizes=[r + 1] * n, input_split_sizes=splits)
    expect_equal(recv, torch.cat([torch.full((r + 1, 2), float(100 * s + r)) for s in range(n)]))
    outs = [torch.empty(2) for _ in range(n)]
    dist.all_to_all(outs, [torch.full((2,), float(10 * r + i)) for i in range(n)])
    for s, o in enumerate(outs):
        expect_equal(o, torch.full((2,), float(10 * s + r)))


def gather_scatter(r, n):
    root = n - 1
    outs = [torch.empty(2) for _ in range(n)] if r == root else None
    dist.gather(torch.full((2,), float(r)), gather_list=outs, dst=root)
    if r == root:
        for i, o in enumerate(outs):
            expect_equal(o, torch.full((2,), float(i)))
    out = torch.empty(3)
    dist.scatter(out, [torch.full((3,), float(i * 7)) for i in range(n)] if r == 0 else None, src=0)
    expect_equal(out, torch.full((3,), float(r * 7)))


def async_work(r, n):
    ts = [torch.full((8,), float(r + k)) for k in range(4)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    for k, (w, t) in enumerate(zip(works, ts)):
        w.wait()
        expect_equal(t, torch.full((8,), float(n * (n - 1) // 2 + n * k)))
    fut = dist.all_reduce(torch.ones(2), async_op=True).get_future()
    expect_equal(fut.wait()[0], torch.full((2,), float(n)))
    dist.barrier()


def subgroup(r, n):
    low = dist.new_group([0, 1])
    high = dist.new_group([1, 2]) if n >= 3 else None
    if r in (0, 1):
        t = torch.full((3,), float(r + 1))
        dist.all_reduce(t, group=low)
        expect_equal(t, torch.full((3,), 3.0))
        b = torch.full((2,), float(r))
        dist.broadcast(b, src=1, group=low)  # src is a global rank
        expect_equal(b, torch.full((2,), 1.0))
    if high is not None and r in (1, 2):
        t = torch.full((3,), float(r + 1))
        dist.all_reduce(t, group=high)
        expect_equal(t, torch.full((3,), 5.0))


def unsupported(r, n):
    for what, call in (("send", lambda: dist.send(torch.ones(1), dst=(r + 1) % n)),
                       ("BAND", lambda: dist.all_reduce(torch.ones(1, dtype=torch.int32), op=dist.ReduceOp.BAND))):
        try:
            call()
        except RuntimeError as e:
            if "smb backend" not in str(e):
                raise AssertionError(f"{what}: unclear error {e}") from e
        else:
            raise AssertionError(f"{what}: no error")


def ddp_matches_gloo(r, n):
    gloo = dist.new_group(list(range(n)), backend="gloo")
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    twin = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    twin.load_state_dict(reference.state_dict())
    if r != 0:  # DDP must broadcast rank 0's weights to everyone
        with torch.no_grad():
            for p in twin.parameters():
                p.add_(1.0)
    over_smb = torch.nn.parallel.DistributedDataParallel(twin, bucket_cap_mb=0.0001)  # several buckets
    over_gloo = torch.nn.parallel.DistributedDataParallel(reference, process_group=gloo)
    for p, q in zip(over_smb.parameters(), over_gloo.parameters()):
        expect_equal(p.detach(), q.detach())
    for step in range(3):
        x = torch.randn(4, 6, generator=torch.Generator().manual_seed(10 * step + r))
        for model in (over_smb, over_gloo):
            model.zero_grad()
            model(x).square().sum().backward()
        for p, q in zip(over_smb.parameters(), over_gloo.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-6)


def main():
    dist.init_process_group("smb")
    r, n = dist.get_rank(), dist.get_world_size()
    if dist.get_backend() != "smb":
        raise SystemExit(f"backend is {dist.get_backend()}")
    for name, fn in (("all_reduce", all_reduce), ("broadcast", broadcast), ("all_gather", all_gather),
                     ("reduce_scatter", reduce_scatter), ("all_to_all", all_to_all),
                     ("gather_scatter", gather_scatter), ("async_work", async_work), ("subgroup", subgroup),
                     ("unsupported", unsupported), ("ddp_matches_gloo", ddp_matches_gloo)):
        if os.environ.get("SMB_TEST_ONLY", name) != name:  # one check alone: SMB_TEST_ONLY=<name>
            continue
        check(name, lambda: fn(r, n))
        dist.barrier()
    print(f"[rank {r}] {'OK' if not FAILURES else 'FAILED: ' + ', '.join(FAILURES)}", flush=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
