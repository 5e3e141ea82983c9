#!/usr/bin/env python3
"""Where smb.torch's exchange of CUDA gradients spends its time, beside
gloo on the same tensors: run by tools/gpu-check.sh under smbrun, 2 ranks
(they may share one GPU):

    smbrun -np 2 --local-servers 2 -- python3 tools/gpu/cuda_exchange_profile.py [--device cpu]

The tensors are resnet18's gradients (62 tensors, 44.7 MB of float32). Rank
0 prints one JSON line per measurement, {"what", "ms"} (the median of the
timed rounds, every rank entering each round together):

  d2h_pinned, h2d_pinned, h2d_pageable   one flat copy of all of them
  host_smb, host_gloo                    allreduce of one flat host tensor
  cuda_gloo                              gloo's allreduce of the flat CUDA tensor
  cuda_smb_flat                          hvd.allreduce_ of the flat CUDA tensor
  cuda_smb_grouped                       hvd.grouped_allreduce_ of the 62 CUDA
                                         tensors (what DistributedOptimizer does)
  memcpy, fabric_write, fabric_read,     rank 0 alone (the others wait): one
  fabric_accumulate                      host copy; the flat host tensor into a
                                         buffer striped over the servers, back,
                                         and a server-side add of one region
                                         into another (the fabric's primitives)

Rank 0 also prints {"paths": [...]}: the transport behind each server.

A benchmark, not a test: it asserts only that the sums are right.
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torchvision.models as models

import smb.torch as hvd


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as synthetic_benchmark.py: more contend with the servers on a small host
    hvd.init()
    dist.init_process_group("gloo")
    rank = hvd.rank()
    if args.device == "cuda":
        device = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    shapes = [p.shape for p in models.resnet18(num_classes=100).parameters()]
    grads = [torch.ones(s, device=device) for s in shapes]
    numel = sum(g.numel() for g in grads)
    flat = torch.ones(numel, device=device)
    pinned = torch.empty(numel, pin_memory=device.type == "cuda")
    pageable = torch.ones(numel)

    def timed(what, fn, check=None):
        times = []
        for i in range(args.rounds + 1):
            dist.barrier()
            sync()
            started = time.perf_counter()
            fn()
            sync()
            if i:  # the first round allocates and connects
                times.append(time.perf_counter() - started)
        if check is not None:
            check()
        if rank == 0:
            times.sort()
            print(json.dumps({"what": what, "ms": round(1000 * times[len(times) // 2], 2),
                              "bytes": numel * 4, "device": str(device)}), flush=True)

    size = hvd.size()
    from smb.collective import basics
    client = basics.state().client
    if rank == 0:
        print(json.dumps({"paths": client.describe_paths()}), flush=True)
    timed("d2h_pinned", lambda: pinned.copy_(flat))
    timed("h2d_pinned", lambda: flat.copy_(pinned))
    timed("h2d_pageable", lambda: flat.copy_(pageable))
    host = torch.ones(numel)
    timed("host_smb", lambda: (host.fill_(1.0), hvd.allreduce_(host, op=hvd.Sum, name="host")),
          lambda: torch.testing.assert_close(host, torch.full_like(host, size)))
    timed("host_gloo", lambda: (host.fill_(1.0), dist.all_reduce(host)))
    if device.type == "cuda":
        timed("cuda_gloo", lambda: (flat.fill_(1.0), dist.all_reduce(flat)))
    timed("cuda_smb_flat", lambda: (flat.fill_(1.0), hvd.allreduce_(flat, op=hvd.Sum, name="flat")),
          lambda: torch.testing.assert_close(flat, torch.full_like(flat, size)))

    def grouped():
        for g in grads:
            g.fill_(1.0)
        hvd.grouped_allreduce_(grads, op=hvd.Sum, name="grads")

    timed("cuda_smb_grouped", grouped,
          lambda: [torch.testing.assert_close(g, torch.full_like(g, size)) for g in grads])
    stride = (1 << 20) * len(client.servers)  # regions aligned to whole stripes: the add stays on each server
    region = -(-numel * 4 // stride) * stride
    buf = client.create(f"profile-{rank}", 2 * region)
    raw = host.numpy().view("uint8")
    alone = rank == 0
    copy = torch.empty_like(host)
    timed("memcpy", lambda: alone and copy.copy_(host))
    timed("fabric_write", lambda: alone and buf.write(0, raw))
    timed("fabric_read", lambda: alone and buf.read(0, raw))
    timed("fabric_accumulate", lambda: alone and buf.apply_from("accumulate", buf, "f32", region, numel, 0))
    buf.close()
    dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
