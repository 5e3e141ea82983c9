#!/usr/bin/python3
"""Elastic training on scikit-learn's digits: Horovod's elastic API with
smb.torch, the state kept in the fabric's memory servers.

    smbrun -np 3 --min-np 2 --max-np 4 --local-servers 2 -- /usr/bin/python3 elastic_digits.py

Kill a worker (kill -9) while it trains: the others re-form within
seconds, from the last commit in the servers, and smbrun starts a
replacement that reads the state from the servers too. Kill them all and
smbrun as well, then run the same command with --job-id (or --resume) and
--servers of the same smbd: training goes on from the last commit, with
no checkpoint file.

Prints one JSON line per epoch ({"epoch", "accuracy", "size", ...}) on
rank 0; --record DIR writes each rank's processed sample indices there
(for the tests); --step-delay S sleeps S seconds per batch (so that a
test can kill a worker mid-epoch).
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_digits import Net, accuracy, digits  # noqa: E402

import smb.torch as hvd  # noqa: E402


class Indexed(torch.utils.data.Dataset):
    """(x, y, index): the index lets --record say which samples a rank used."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i], i


def _round():
    from smb.collective import basics
    return basics.state().elastic.round.number


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--commit-every", type=int, default=1, help="batches between commits")
    p.add_argument("--step-delay", type=float, default=0.0)
    p.add_argument("--record", metavar="DIR")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    train, test = digits(args.seed)
    dataset = Indexed(*train)

    hvd.init()
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=args.seed)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0, steps=0)

    def set_lr():
        """Scaled by the workers (Horovod's rule), decayed by epoch."""
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size() * 0.7 ** state.epoch
    state.register_reset_callbacks([set_lr])

    first = {"resumed": None}

    def note(entry):
        if args.record:
            with open(os.path.join(args.record, f"{os.environ['SMB_WORKER_ID']}.jsonl"), "a") as f:
                f.write(json.dumps(dict(entry, round=_round())) + "\n")

    def commit():
        """state.commit(), noted with --record (a commit that then reports
        new workers did happen)."""
        try:
            state.commit()
        except hvd.elastic.HostsUpdatedInterrupt:
            note({"committed": state.steps})
            raise
        note({"committed": state.steps})

    @hvd.elastic.run
    def train_epochs(state):
        if first["resumed"] is None:
            first["resumed"] = (state.epoch, state.batch, state.steps)
            if state.steps and hvd.rank() == 0:
                print(f"resumed at epoch {state.epoch} batch {state.batch} (step {state.steps})", flush=True)
        while state.epoch < args.epochs:
            if state.batch == 0:
                sampler.set_epoch(state.epoch)
            set_lr()
            for batch_idx, (x, y, index) in enumerate(loader):
                note({"epoch": state.epoch, "step": state.steps, "size": hvd.size(), "indices": index.tolist()})
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
                if args.step_delay:
                    time.sleep(args.step_delay)
                state.batch += 1
                state.steps += 1
                sampler.record_batch(batch_idx, args.batch_size)
                if state.steps % args.commit_every == 0:
                    commit()
            if hvd.rank() == 0:
                print(json.dumps({"epoch": state.epoch, "accuracy": accuracy(model, test), "size": hvd.size(),
                                  "steps": state.steps}), flush=True)
            state.epoch += 1
            state.batch = 0
            sampler.set_epoch(state.epoch)
            commit()

    train_epochs(state)
    hvd.shutdown()


if __name__ == "__main__":
    main()
