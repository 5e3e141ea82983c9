#!/usr/bin/python3
"""Images per second for a torchvision model on random data, written with
Horovod's API (smb.torch), and the same with PyTorch DDP over gloo:

    smbrun -np 4 -- /usr/bin/python3 synthetic_benchmark.py --model resnet18 --batch-size 8
    smbrun -np 4 -- /usr/bin/python3 synthetic_benchmark.py --model resnet18 --batch-size 8 --baseline ddp-gloo

Prints images/s per worker and in total (rank 0), or one JSON line with --json.
"""

import argparse
import json
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
    parser.add_argument("--baseline", choices=["none", "ddp-gloo", "ddp-smb"], default="none",
                        help="none: smb.torch's DistributedOptimizer; ddp-gloo / ddp-smb: DDP over "
                             "torch.distributed's gloo or the fabric's 'smb' backend")
    parser.add_argument("--fp16-allreduce", action="store_true", help="Compression.fp16")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)

    model = getattr(models, args.model)(num_classes=100)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.baseline in ("ddp-gloo", "ddp-smb"):
        import torch.distributed as dist
        if args.baseline == "ddp-smb":
            import smb.torch  # noqa: F401 - registers the backend
        dist.init_process_group(args.baseline[len("ddp-"):])
        rank, size = dist.get_rank(), dist.get_world_size()
        model = torch.nn.parallel.DistributedDataParallel(model)
    else:
        import smb.torch as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             compression=compression)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, 100, (args.batch_size,))

    def step():
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()

    for _ in range(args.warmup_iters):
        step()
    started = time.monotonic()
    for _ in range(args.iters):
        step()
    rate = args.batch_size * args.iters / (time.monotonic() - started)
    if rank == 0:
        result = {"model": args.model, "workers": size, "batch_size": args.batch_size,
                  "backend": args.baseline if args.baseline != "none" else "smb",
                  "images_per_second_per_worker": rate, "images_per_second": rate * size}
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
