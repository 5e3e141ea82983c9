#!/usr/bin/python3
"""One worker of tools/bench/elastic_bench.py: resnet18 on random data,
committing its state every --commit-every steps, in one of two ways:

  smb     hvd.elastic under smbrun's elastic mode: the state in the fabric
  file    the TorchElastic way: DDP over gloo (RANK, WORLD_SIZE,
          MASTER_ADDR, MASTER_PORT), torch.save of the same state to a
          file, loaded by every worker when the job restarts

Prints JSON lines with wall-clock times (time.time(), comparable across
processes): start, restored (seconds to read the state), step (each
finished step), commit (seconds one commit took).
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
import torchvision


def say(**event):
    event.setdefault("t", time.time())
    event["pid"] = os.getpid()
    print(json.dumps(event), flush=True)


def model_and_optimizer():
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def batch(args):
    return torch.randn(args.batch_size, 3, args.image, args.image), torch.randint(0, 10, (args.batch_size,))


def run_smb(args):
    import smb.torch as hvd
    hvd.init()
    model, optimizer = model_and_optimizer()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, optimizer, step=0)
    first = [True]

    @hvd.elastic.run
    def train(state):
        if first[0] and state.step:
            say(event="resumed", step=state.step)
        first[0] = False
        while state.step < args.steps:
            x, y = batch(args)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
            state.step += 1
            say(event="step", step=state.step, rank=hvd.rank(), size=hvd.size())
            if state.step % args.commit_every == 0:
                started = time.perf_counter()
                try:
                    state.commit()
                finally:
                    say(event="commit", step=state.step, dt=time.perf_counter() - started)

    restore = state.restore

    def timed_restore():
        started = time.perf_counter()
        restore()
        say(event="restored", dt=time.perf_counter() - started)
    state.restore = timed_restore
    train(state)
    hvd.shutdown()


def run_file(args):
    import torch.distributed as dist
    dist.init_process_group("gloo")
    model, optimizer = model_and_optimizer()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    step = 0
    if os.path.exists(args.checkpoint):
        started = time.perf_counter()
        saved = torch.load(args.checkpoint)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        step = saved["step"]
        say(event="restored", dt=time.perf_counter() - started)
        say(event="resumed", step=step)
    while step < args.steps:
        x, y = batch(args)
        optimizer.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        optimizer.step()
        step += 1
        say(event="step", step=step, rank=dist.get_rank(), size=dist.get_world_size())
        if step % args.commit_every == 0 and dist.get_rank() == 0:
            started = time.perf_counter()
            tmp = args.checkpoint + ".tmp"
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, tmp)
            os.replace(tmp, args.checkpoint)
            say(event="commit", step=step, dt=time.perf_counter() - started)
        if step % args.commit_every == 0:
            dist.barrier()  # the checkpoint is whole before anyone goes on
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("smb", "file"), required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--commit-every", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--image", type=int, default=112)
    p.add_argument("--checkpoint", default="/tmp/elastic-bench.pt")
    args = p.parse_args()
    torch.set_num_threads(1)
    say(event="start")
    (run_smb if args.mode == "smb" else run_file)(args)


if __name__ == "__main__":
    sys.exit(main())
