"""Horovod's ElasticSampler: torch's DistributedSampler contract, with the
samples this epoch has already processed left out when the job re-forms.

The epoch's order is a permutation fixed by (seed, epoch). What the job
has processed is a prefix of that order of processed_num samples: every
member takes one batch of each block of size() x batch_size consecutive
samples (strided by rank), so after k batches on every member exactly the
first k x batch_size x size() samples are done, whatever size() was when
each block ran. That count is the sampler's state (commit() keeps it);
after a re-form the rest of the epoch is partitioned among the new
members. As DistributedSampler does, the last samples are repeated where
the rest does not divide evenly among the members (at most size() - 1),
so that every member runs as many batches.
"""

import math
import random

import torch

from smb.collective import basics


class ElasticSampler(torch.utils.data.Sampler):
    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.num_replicas = 1
        self.rank = 0
        self.remaining_indices = []
        self.indices = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch):
        """A new epoch: nothing of it processed yet."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """After a batch on every member: batch_size x size() more samples done."""
        self.processed_num = min(len(self.dataset), self.processed_num + batch_size * self.num_replicas)

    def record_indices(self, indices):
        """Horovod's other spelling (a batch's indices on this member)."""
        self.processed_num = min(len(self.dataset), self.processed_num + len(indices) * self.num_replicas)

    def get_indices(self, batch_idx, batch_size):
        start = batch_idx * batch_size
        return self.indices[start:start + batch_size]

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state):
        self.epoch = state["epoch"]
        self.processed_num = state["processed_num"]
        self.reset()

    def reset(self):
        """Partitions the rest of the epoch among the job's current members."""
        if basics.is_initialized():
            self.num_replicas, self.rank = basics.size(), basics.rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas
        self._partition()

    def _partition(self):
        padded = self.remaining_indices + self.remaining_indices[:self.total_size - len(self.remaining_indices)]
        self.indices = padded[self.rank:self.total_size:self.num_replicas]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
