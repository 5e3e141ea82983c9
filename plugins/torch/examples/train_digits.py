#!/usr/bin/python3
"""Train a small CNN on scikit-learn's bundled digits (no download) with
smb.torch, Horovod's API over the fabric.

    smbrun -np 4 -- /usr/bin/python3 train_digits.py                # Horovod's gradient averaging
    smbrun -np 4 -- /usr/bin/python3 train_digits.py --mode seasgd  # ETRI's hybrid modes:
                                                  --mode downpour | --mode sync  [--tau N --alpha A]
    smbrun -np 4 -- /usr/bin/python3 train_digits.py --baseline ddp-gloo   # PyTorch DDP over gloo
    /usr/bin/python3 train_digits.py --baseline single                      # one process

Workers of one node form a group (the hybrid modes average gradients in
the group every step and exchange weights with the fabric every tau
steps), so on one machine all of them are one group and sync or downpour
train as horovod mode does; SMB_TORCH_GROUP_SIZE=2 makes groups of 2
there (smbrun prints the groups at start). Prints the test accuracy after
each epoch; --json prints one JSON line per epoch.
"""

import argparse
import json
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def digits(seed):
    """(train, test): 8x8 images scaled to [0, 1], a fixed split of 1437/360."""
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(d.target)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    x, y = x[order], y[order]
    return (x[360:], y[360:]), (x[:360], y[:360])


def accuracy(model, data):
    model.eval()
    with torch.no_grad():
        correct = (model(data[0]).argmax(1) == data[1]).sum().item()
    model.train()
    return correct / len(data[1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["horovod", "seasgd", "downpour", "sync"], default="horovod")
    parser.add_argument("--baseline", choices=["none", "single", "ddp-gloo"], default="none")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch", type=int, default=32, help="per worker")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--tau", type=int, default=1)
    parser.add_argument("--alpha", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="one JSON line per epoch")
    args = parser.parse_args()
    torch.set_num_threads(1)

    train, test = digits(args.seed)
    torch.manual_seed(args.seed)  # every rank builds the same model
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    if args.baseline == "single":
        rank, size = 0, 1
    elif args.baseline == "ddp-gloo":
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, size = dist.get_rank(), dist.get_world_size()
        model = nn.parallel.DistributedDataParallel(model)
    else:
        import smb.torch as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        mode = None if args.mode == "horovod" else args.mode
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), mode=mode,
                                             tau=args.tau, alpha=args.alpha)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)

    shard = (train[0][rank::size], train[1][rank::size])  # each worker its own part of the data
    started = time.monotonic()
    for epoch in range(args.epochs):
        order = torch.randperm(len(shard[1]), generator=torch.Generator().manual_seed(1000 * epoch + rank))
        for at in range(0, len(order), args.batch):
            batch = order[at:at + args.batch]
            optimizer.zero_grad()
            F.cross_entropy(model(shard[0][batch]), shard[1][batch]).backward()
            optimizer.step()
        acc = accuracy(model, test)
        if rank == 0:
            elapsed = time.monotonic() - started
            if args.json:
                print(json.dumps({"epoch": epoch + 1, "accuracy": acc, "seconds": elapsed, "workers": size,
                                  "mode": args.baseline if args.baseline != "none" else args.mode}), flush=True)
            else:
                print(f"epoch {epoch + 1}: test accuracy {acc:.4f} ({elapsed:.1f} s)", flush=True)
    if args.baseline == "none":
        import smb.torch as hvd
        hvd.shutdown()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
