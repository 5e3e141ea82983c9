#!/usr/bin/python3
"""Locks and barriers, and the GIL released during blocking calls: several
threads are inside blocking smb calls at once (proved by what they wait for,
not by timing)."""

import threading
import time

import fabric
from fabric import needs_numpy, np, smb


class LockTest(fabric.FabricTestCase):
    SERVERS = 2
    CAPACITY = "64M"

    def test_lock_excludes_a_second_client_until_released(self):
        name = self.unique_name("lock")
        other = self.new_client()
        with self.client.lock(name) as held:
            self.assertTrue(held.held)
            start = time.monotonic()
            with self.assertRaises(smb.Timeout) as cm:
                other.lock(name, timeout=0.3)
            self.assertGreaterEqual(time.monotonic() - start, 0.25)
            self.assertIsInstance(cm.exception, TimeoutError)
            self.assertIn(name, str(cm.exception))
            self.assertEqual(cm.exception.code, "timeout")
        self.assertFalse(held.held)
        with other.lock(name, timeout=5) as second:  # free again
            self.assertTrue(second.held)

    def test_lock_ranges_overlap_or_not(self):
        name = self.unique_name("lock")
        other = self.new_client()
        with self.client.lock(name, offset=0, length=100):
            with other.lock(name, offset=100, length=100, timeout=5):  # disjoint: granted
                pass
            with self.assertRaises(smb.Timeout):
                other.lock(name, offset=50, length=100, timeout=0.3)

    def test_unlock_explicitly_and_waiter_granted(self):
        name = self.unique_name("lock")
        first = self.client.lock(name)
        granted = threading.Event()

        def second():
            with self.new_client().lock(name, timeout=30):
                granted.set()

        t = threading.Thread(target=second, daemon=True)
        t.start()
        first.unlock()  # whenever the waiter queued, it is granted now
        t.join(30)
        self.assertFalse(t.is_alive())
        self.assertTrue(granted.is_set())
        self.assertFalse(first.held)

    def test_lock_argument_errors(self):
        with self.assertRaises(smb.InvalidArgument):
            self.client.lock(self.unique_name("lock"), timeout=0)
        with self.assertRaises(smb.InvalidArgument):
            self.client.lock(self.unique_name("lock"), lease=-1)


class BarrierTest(fabric.FabricTestCase):
    SERVERS = 2
    CAPACITY = "64M"

    def test_two_parties_from_two_threads(self):
        name = self.unique_name("barrier")
        clients = [self.client, self.new_client()]
        self.run_threads([lambda c=c: c.barrier(name, 2, timeout=30) for c in clients])
        # Reusable: a second round with the same name.
        self.run_threads([lambda c=c: c.barrier(name, 2, timeout=30) for c in clients])

    def test_barrier_timeout(self):
        name = self.unique_name("barrier")
        start = time.monotonic()
        with self.assertRaises(smb.Timeout) as cm:
            self.client.barrier(name, 2, timeout=0.3)
        self.assertGreaterEqual(time.monotonic() - start, 0.25)
        self.assertIsInstance(cm.exception, TimeoutError)
        self.assertIn(name, str(cm.exception))


class GilReleasedTest(fabric.FabricTestCase):
    """If a blocking call kept the GIL, no second thread could enter one: the
    barrier below could never fill, the bumps could never be sent, and each
    test would end in smb.Timeout, not in a hang (every wait is bounded)."""

    SERVERS = 2
    CAPACITY = "64M"
    THREADS = 4

    def test_four_threads_in_one_barrier(self):
        # Completes only when all four threads are inside barrier() together.
        name = self.unique_name("barrier")
        self.run_threads([lambda: self.client.barrier(name, self.THREADS, timeout=30)] * self.THREADS)

    @needs_numpy
    def test_four_waiters_each_released_by_its_own_bump(self):
        buffers = [self.client.create(self.unique_name(), 4096) for _ in range(self.THREADS)]
        targets = [b.version() + 1 for b in buffers]
        started = [threading.Event() for _ in buffers]
        results = [None] * self.THREADS

        def waiter(i):
            started[i].set()
            try:
                results[i] = buffers[i].wait_version(targets[i], timeout=30)
            except smb.Error as e:
                results[i] = e

        threads = [threading.Thread(target=waiter, args=(i,), daemon=True) for i in range(self.THREADS)]
        for t in threads:
            t.start()
        for e in started:
            self.assertTrue(e.wait(30), "a waiter thread did not start")
        bumper = self.new_client()
        ones = np.ones(1024, np.float32)
        # Release them one at a time, last first: each wakes on its own bump,
        # the others keep waiting (on the server: no polling, no GIL).
        for i in reversed(range(self.THREADS)):
            bumper.open(buffers[i].name).apply("accumulate", x=ones)
            threads[i].join(30)
            self.assertFalse(threads[i].is_alive(), f"waiter {i} not released by its bump")
            self.assertEqual(results[i], targets[i])
            for j in range(i):
                self.assertIsNone(results[j], f"waiter {j} returned before its buffer was bumped")

    def test_threads_waiting_do_not_block_the_main_thread(self):
        # A thread in a long wait_version; meanwhile this thread does real work.
        b = self.client.create(self.unique_name(), 4096)
        target = b.version() + 1  # taken here: the thread may start after the bump below
        errors = []

        def waiter():
            try:
                b.wait_version(target, timeout=30)
            except smb.Error as e:
                errors.append(e)

        t = threading.Thread(target=waiter, daemon=True)
        t.start()
        for i in range(50):
            b.write(0, bytes([i]) * 64)
            self.assertEqual(b.read(0, size=64), bytearray([i]) * 64)
        self.assertTrue(t.is_alive(), f"wait_version returned before the bump: {errors}")
        b.apply("scale", "f32", count=1024, alpha=1.0)
        t.join(30)
        self.assertFalse(t.is_alive())
        self.assertEqual(errors, [])


if __name__ == "__main__":
    fabric.main()
