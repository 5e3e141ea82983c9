#!/usr/bin/python3
"""gloo's allreduce (torch.distributed) of --floats f32 per worker, averaged:
the reference beside MPI_Allreduce in tools/bench/testbed_exchange.py. One
process per worker; rank 0 prints one JSON object with the slowest rank's
time per allreduce (each starts at a barrier) and their median.

Usage: gloo_allreduce.py --rank R --world N --master ADDR:PORT [--floats N] [--iters K]
"""

import argparse
import json
import time

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master", required=True)
    p.add_argument("--floats", type=int, default=25_000_000)
    p.add_argument("--iters", type=int, default=5)
    args = p.parse_args()
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}", rank=args.rank, world_size=args.world)
    t = torch.full((args.floats,), 0.001 * (args.rank + 1))
    dist.all_reduce(t)  # warm-up: connections
    times = []
    for _ in range(args.iters):
        dist.barrier()
        begin = time.perf_counter()
        dist.all_reduce(t)
        t /= args.world
        mine = torch.tensor([time.perf_counter() - begin], dtype=torch.float64)
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        times.append(mine.item())
    if args.rank == 0:
        print(json.dumps({"gloo_s": times, "gloo_median_s": sorted(times)[len(times) // 2]}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
