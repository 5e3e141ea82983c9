#!/usr/bin/env python3
"""smb.torch and the update engine on CUDA tensors, with exact values: the
GPU paths that the CPU-only test suite cannot reach. Run by
tools/gpu-check.sh under smbrun (2 ranks may share one GPU):

    smbrun -np 2 --local-servers 2 -- python3 tools/gpu/torch_cuda_check.py

Each rank prints one JSON line per check: {"check", "rank", "status":
"pass" | "fail" | "skip", "detail"}. Exit status 1 if any check failed.
Without a CUDA device every check is a skip that says so;
SMB_GPU_CHECK_ON_CPU=1 runs the same checks on CPU tensors instead (how the
script itself is tested where there is no GPU).
"""

import json
import os
import sys
import traceback

import numpy as np
import torch

import smb
import smb.torch as hvd

results = []


def report(check, status, detail=""):
    line = {"check": check, "rank": hvd.rank(), "status": status, "detail": detail}
    results.append(line)
    # One write per line: print() writes the text and its newline apart,
    # and the ranks share smbrun's output.
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def run(check, fn):
    try:
        detail = fn()
        report(check, "pass", detail or "")
    except Exception as e:  # noqa: BLE001 - every failure is reported, the next check runs
        report(check, "fail", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}")


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    on_cpu = os.environ.get("SMB_GPU_CHECK_ON_CPU") == "1"
    if not torch.cuda.is_available() and not on_cpu:
        for check in ("allreduce", "grouped_allreduce", "allgather", "broadcast", "optimizer", "engine"):
            report(check, "skip", "no CUDA device (torch.cuda.is_available() is False)")
        hvd.shutdown()
        return 0
    if on_cpu:
        device = torch.device("cpu")
    else:
        device = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
        torch.cuda.set_device(device)
    expected_sum = size * (size + 1) / 2

    def allreduce():
        t = torch.full((1 << 20,), float(rank + 1), device=device)
        out = hvd.allreduce(t, op=hvd.Sum, name="cuda.allreduce")
        assert out.device == device, f"result on {out.device}, not {device}"
        assert torch.equal(out, torch.full_like(t, expected_sum)), "wrong sum"
        avg = hvd.allreduce(t, name="cuda.average")
        assert torch.allclose(avg, torch.full_like(t, expected_sum / size)), "wrong average"
        return f"{t.numel()} floats on {device}"

    def grouped():
        ts = [torch.full((n,), float(rank + 1), device=device) for n in (3, 1000, 70000)]
        outs = hvd.grouped_allreduce(ts, op=hvd.Sum, name="cuda.grouped")
        for o, t in zip(outs, ts):
            assert o.device == device and torch.equal(o, torch.full_like(t, expected_sum)), "wrong grouped sum"

    def allgather():
        t = torch.full((rank + 1, 3), float(rank), device=device)
        out = hvd.allgather(t, name="cuda.allgather")
        want = torch.cat([torch.full((r + 1, 3), float(r), device=device) for r in range(size)])
        assert out.device == device and torch.equal(out, want), "wrong allgather"

    def broadcast():
        t = torch.full((4096,), float(rank), device=device)
        out = hvd.broadcast(t, root_rank=size - 1, name="cuda.broadcast")
        assert out.device == device and torch.equal(out, torch.full_like(t, float(size - 1))), "wrong broadcast"

    def optimizer():
        # The same steps on a CUDA model and on its CPU twin: the averaged
        # gradients, and so the weights, agree (float32, small tolerance).
        torch.manual_seed(0)
        cpu_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        gpu_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
        gpu_model.load_state_dict(cpu_model.state_dict())
        opts = [hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                         named_parameters=[(f"{tag}.{n}", p) for n, p in m.named_parameters()])
                for tag, m in (("cpu", cpu_model), ("gpu", gpu_model))]
        g = torch.Generator().manual_seed(rank)
        for _ in range(3):
            x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
            for m, opt, dev in ((cpu_model, opts[0], "cpu"), (gpu_model, opts[1], device)):
                opt.zero_grad()
                torch.nn.functional.mse_loss(m(x.to(dev)), y.to(dev)).backward()
                opt.step()
        for (n, a), b in zip(cpu_model.named_parameters(), gpu_model.parameters()):
            assert torch.allclose(a, b.cpu(), atol=1e-5), f"{n}: CUDA model differs from the CPU one"
        return f"hidden fraction {opts[1].communication_stats()['hidden_fraction']:.2f}"

    def engine():
        # One group per rank (no NCCL: it refuses two ranks on one GPU), the
        # synchronous exchange every step: every rank ends with the average.
        from smb.collective import basics
        client = basics.state().client
        n = 3000
        e = smb.UpdateEngine(client, f"{basics.state().job}/gpu-engine", n, mode="sync", groups=size, group=rank,
                             cuda_device=-1 if on_cpu else device.index)
        params = torch.full((n,), float(rank + 1), device=device)
        e.initialize(params)  # the first worker's weights become everyone's: 1.0
        assert torch.equal(params, torch.ones_like(params)), "initialize did not give rank 0's weights"
        params += float(rank)  # rank r now holds 1 + r
        e.after_step(params)  # tau 1: the average over the groups
        want = 1.0 + (size - 1) / 2
        assert torch.allclose(params, torch.full_like(params, want)), f"after_step gave {params[:3]}, not {want}"
        on_device = torch.zeros(n, device=device)
        e.global_weights(on_device)
        assert torch.allclose(on_device, torch.full_like(on_device, want)), "global weights (device) differ"
        host = np.zeros(n, dtype=np.float32)
        e.global_weights(host)  # a GPU engine reads them into host memory too
        assert np.allclose(host, want), "global weights (host) differ"
        return f"{n} floats on {device}"

    run("allreduce", allreduce)
    run("grouped_allreduce", grouped)
    run("allgather", allgather)
    run("broadcast", broadcast)
    run("optimizer", optimizer)
    run("engine", engine)
    hvd.shutdown()
    return 1 if any(r["status"] == "fail" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
