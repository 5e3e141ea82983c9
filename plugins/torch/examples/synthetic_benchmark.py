#!/usr/bin/python3
"""Images per second for a torchvision model on random data, written with
Horovod's API (smb.torch), and the same with PyTorch DDP over gloo:

    smbrun -np 4 -- /usr/bin/python3 synthetic_benchmark.py --model resnet18 --batch-size 8
    smbrun -np 4 -- /usr/bin/python3 synthetic_benchmark.py --model resnet18 --batch-size 8 --baseline ddp-gloo
    smbrun -np 2 -- python3 synthetic_benchmark.py --device cuda [--baseline ddp-nccl]

Prints images/s per worker and in total (rank 0), or one JSON line with --json.
"""

import argparse
import json
import os
import time

import torch
import torch.nn.functional as F
import torchvision.models as models


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18", help="a torchvision.models name")
    parser.add_argument("--batch-size", type=int, default=8, help="per worker")
    parser.add_argument("--image-size", type=int, default=112)
    parser.add_argument("--warmup-iters", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--baseline", choices=["none", "ddp-gloo", "ddp-smb", "ddp-nccl"], default="none",
                        help="none: smb.torch's DistributedOptimizer; ddp-gloo / ddp-smb / ddp-nccl: DDP over "
                             "torch.distributed's gloo, the fabric's 'smb' backend or NCCL (with --device cuda)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where the model and data are (cuda: the local rank's GPU, modulo the GPUs there)")
    parser.add_argument("--fp16-allreduce", action="store_true", help="Compression.fp16")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)

    device = torch.device("cpu")
    if args.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", os.environ.get("SMB_LOCAL_RANK", "0")))
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
    model = getattr(models, args.model)(num_classes=100).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.baseline.startswith("ddp-"):
        import torch.distributed as dist
        if args.baseline == "ddp-smb":
            import smb.torch  # noqa: F401 - registers the backend
        dist.init_process_group(args.baseline[len("ddp-"):])
        rank, size = dist.get_rank(), dist.get_world_size()
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device] if args.device == "cuda" else None)
    else:
        import smb.torch as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             compression=compression)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    target = torch.randint(0, 100, (args.batch_size,), device=device)

    def step():
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()

    for _ in range(args.warmup_iters):
        step()
    if args.device == "cuda":
        torch.cuda.synchronize()
    stats_before = optimizer.communication_stats() if hasattr(optimizer, "communication_stats") else None
    started = time.monotonic()
    for _ in range(args.iters):
        step()
    if args.device == "cuda":
        torch.cuda.synchronize()
    rate = args.batch_size * args.iters / (time.monotonic() - started)
    if rank == 0:
        result = {"model": args.model, "workers": size, "batch_size": args.batch_size, "device": args.device,
                  "backend": args.baseline if args.baseline != "none" else "smb",
                  "images_per_second_per_worker": rate, "images_per_second": rate * size}
        if stats_before is not None:  # the timed steps' exchange: how much of it ran behind backward
            after = optimizer.communication_stats()
            exchange = after["exchange_s"] - stats_before["exchange_s"]
            exposed = after["exposed_s"] - stats_before["exposed_s"]
            result.update(exchange_ms_per_step=1000 * exchange / args.iters,
                          exposed_ms_per_step=1000 * exposed / args.iters,
                          hidden_fraction=1 - exposed / exchange if exchange > 0 else 0.0,
                          buckets=after["buckets"])
        if args.json:
            print(json.dumps(result), flush=True)
        else:
            print(f"{args.model}, {size} workers, batch {args.batch_size}: {rate:.1f} img/s per worker, "
                  f"{rate * size:.1f} img/s in total ({result['backend']})", flush=True)
    if args.baseline == "none":
        import smb.torch as hvd
        hvd.shutdown()


if __name__ == "__main__":
    main()
