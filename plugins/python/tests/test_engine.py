#!/usr/bin/python3
"""smb.UpdateEngine: two workers (threads, each with its own client) in one
group, synchronous mode, on float32 vectors, with exactly known values."""

import fabric
from fabric import needs_numpy, needs_torch, np, smb, torch

N = 3000  # parameters: 12000 bytes, more than one stripe of the engine's buffers
LR = 0.5
STEPS = 3


@needs_numpy
class UpdateEngineTest(fabric.FabricTestCase):
    SERVERS = 2
    CAPACITY = "64M"

    def engine(self, name, rank, client=None, **kw):
        return smb.UpdateEngine(client or self.new_client(), name, N, mode="sync", groups=1, group=0, group_size=2,
                                group_rank=rank, timeout=30, **kw)

    def run_workers(self, worker):
        return self.run_threads([lambda r=r: worker(r) for r in range(2)], limit=60)

    def test_sync_allreduce_and_after_step(self):
        name = self.unique_name("engine")

        def worker(rank):
            engine = self.engine(name, rank)
            params = np.full(N, 1.0 if rank == 0 else 5.0, np.float32)
            engine.initialize(params)  # the first worker's params become everyone's
            log = {"initial": params.copy(), "grads": [], "params": []}
            for step in range(STEPS):
                grads = np.full(N, rank + 1, np.float32)  # worker 0: 1, worker 1: 2
                grads[0] = (rank + 1) * (step + 1)        # one element that changes per step
                engine.allreduce(grads)                    # in place: the group's average
                log["grads"].append(grads.copy())
                params -= np.float32(LR) * grads
                engine.after_step(params)
                log["params"].append(params.copy())
            final = np.empty(N, np.float32)
            engine.global_weights(final)
            log["global"] = final
            return log

        logs = self.run_workers(worker)
        expected = np.full(N, 1.0, np.float32)
        for log in logs:
            np.testing.assert_array_equal(log["initial"], expected)
        for step in range(STEPS):
            average = np.full(N, 1.5, np.float32)          # (1 + 2) / 2
            average[0] = 1.5 * (step + 1)
            expected = expected - np.float32(LR) * average  # exact in float32
            for rank, log in enumerate(logs):
                with self.subTest(step=step, rank=rank):
                    np.testing.assert_array_equal(log["grads"][step], average)
                    np.testing.assert_array_equal(log["params"][step], expected)
        for log in logs:
            np.testing.assert_array_equal(log["global"], expected)
        self.assertEqual(float(expected[1]), 1.0 - STEPS * 0.75)

    def test_wrong_size_or_dtype_is_invalid_argument(self):
        name = self.unique_name("engine")

        def worker(rank):
            engine = self.engine(name, rank)
            # Refused before any collective, so one worker alone sees each.
            bad = [np.zeros(N + 1, np.float32), np.zeros(N - 1, np.float32), np.zeros(N, np.float64),
                   np.zeros(N, np.int32), np.zeros(N, np.float32)[::2], b"\x00" * (4 * N)]
            messages = []
            for vector in bad:
                for call in (engine.allreduce, engine.after_step, engine.initialize, engine.global_weights):
                    try:
                        call(vector)
                    except smb.InvalidArgument as e:
                        messages.append(str(e))
                    else:
                        raise AssertionError(f"{call.__name__} took {vector!r:.60}")
            # Still usable afterwards: one good collective step.
            params = np.full(N, 2.0, np.float32)
            engine.initialize(params)
            grads = np.full(N, 4.0 * rank, np.float32)
            engine.allreduce(grads)
            return messages, grads

        (messages, grads0), (_, grads1) = self.run_workers(worker)
        joined = "\n".join(messages)
        self.assertIn(f"3001 floats for an engine of {N}", joined)
        self.assertIn(f"2999 floats for an engine of {N}", joined)
        self.assertIn("float32 elements expected", joined)
        self.assertIn("not C-contiguous", joined)
        self.assertIn("UpdateEngine.allreduce", joined)
        self.assertIn("UpdateEngine.global_weights", joined)
        np.testing.assert_array_equal(grads0, np.full(N, 2.0, np.float32))
        np.testing.assert_array_equal(grads1, np.full(N, 2.0, np.float32))

    def test_group_servers_keep_the_group_on_its_own_server(self):
        name = self.unique_name("engine")
        with fabric.running(1, "64M") as own:

            def worker(rank):
                engine = self.engine(name, rank, group_servers=own[0])  # "host:port", as $SMB_GROUP_SERVERS
                params = np.full(N, 2.0, np.float32)
                engine.initialize(params)
                grads = np.full(N, 4.0 * rank, np.float32)
                engine.allreduce(grads)
                return grads

            for grads in self.run_workers(worker):
                np.testing.assert_array_equal(grads, np.full(N, 2.0, np.float32))
            on_own = [b.name for s in smb.Client(own).status() for b in s.buffers]
            on_fabric = [b.name for s in self.client.status() for b in s.buffers]
        self.assertIn(f"{name}/group/0", on_own)
        self.assertNotIn(f"{name}/group/0", on_fabric)
        self.assertIn(f"{name}/global", on_fabric)

    @needs_torch
    def test_torch_tensors_as_vectors(self):
        name = self.unique_name("engine")

        def worker(rank):
            engine = self.engine(name, rank)
            params = torch.full((N,), 3.0)
            engine.initialize(params)
            grads = torch.full((N,), float(2 * rank))  # 0 and 2: average 1
            engine.allreduce(grads)
            params -= grads
            engine.after_step(params)
            return grads, params

        for grads, params in self.run_workers(worker):
            self.assertTrue(torch.equal(grads, torch.ones(N)))
            self.assertTrue(torch.equal(params, torch.full((N,), 2.0)))


# A worker of group 1 in a process of its own: it initializes, says so,
# then sits holding its engine until it is killed.
_PEER = """
import sys, time
import numpy as np
import smb
servers, name, mode = sys.argv[1], sys.argv[2], sys.argv[3]
engine = smb.UpdateEngine(smb.Client(servers), name, 3000, mode=mode, groups=2, group=1, group_size=1,
                          group_rank=0, timeout=60)
engine.initialize(np.zeros(3000, np.float32))
print("ready", flush=True)
time.sleep(600)
"""


@needs_numpy
class PeerLossTest(fabric.FabricTestCase):
    """A worker of another group is SIGKILLed after initialize(): the
    asynchronous modes never wait on peers and go on; the synchronous mode
    fails within 2 s, naming the dead worker, instead of hanging."""

    SERVERS = 2

    def start_peer_and_initialize(self, mode):
        import subprocess
        import sys
        name = self.unique_name("peer-loss")
        peer = subprocess.Popen([sys.executable, "-c", _PEER, ",".join(self.fabric.servers), name, mode],
                                env=fabric.child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: (peer.kill(), peer.wait(), peer.stdout.close(), peer.stderr.close()))
        engine = smb.UpdateEngine(self.new_client(), name, N, mode=mode, groups=2, group=0, group_size=1,
                                  group_rank=0, timeout=60)
        params = np.ones(N, np.float32)
        engine.initialize(params)
        if peer.stdout.readline().strip() != "ready":
            peer.kill()
            self.fail(f"the peer did not initialize: {peer.stderr.read()}")
        peer.kill()
        peer.wait()
        return engine, params

    def test_asynchronous_modes_go_on(self):
        for mode in ("seasgd", "downpour"):
            with self.subTest(mode=mode):
                engine, params = self.start_peer_and_initialize(mode)
                for _ in range(20):
                    params -= np.float32(0.01)
                    engine.after_step(params)
                final = np.empty(N, np.float32)
                engine.global_weights(final)
                self.assertTrue(np.all(np.isfinite(final)))

    def test_synchronous_mode_names_the_dead_worker_within_2_s(self):
        import time
        engine, params = self.start_peer_and_initialize("sync")
        started = time.monotonic()
        with self.assertRaises(smb.Unreachable) as caught:
            engine.after_step(params)
        self.assertLess(time.monotonic() - started, 2.0)
        self.assertIn("the worker of group 1, rank 0 died", str(caught.exception))


if __name__ == "__main__":
    fabric.main()
