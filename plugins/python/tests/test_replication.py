#!/usr/bin/python3
"""Replicated buffers through the smb package: two copies of every stripe
over 3 smbd, one of which is killed (SIGKILL); the open buffer keeps its
bytes and takes writes, accumulates and atomics, and a new process that
lists every server opens and reads it."""

import fabric
from fabric import needs_numpy, np, smb

STRIPE = 4096


class ReplicationTest(fabric.FabricTestCase):
    SERVERS = 3

    def test_checked(self):
        with self.assertRaises(smb.InvalidArgument):
            self.client.create(self.unique_name(), 3 * STRIPE, stripe_unit=STRIPE, replicas=4)


class KilledServerTest(fabric.FabricTestCase):
    """Its own fabric: the test kills one of its servers."""
    SERVERS = 3

    @needs_numpy
    def test_a_killed_server_loses_nothing(self):
        b = self.client.create(self.unique_name(), 3 * STRIPE * 2, stripe_unit=STRIPE, replicas=2)
        self.assertEqual(b.layout.replicas, 2)
        x = np.arange(b.size // 4, dtype=np.float32)
        b.write(0, x)
        b.apply("accumulate", offset=0, x=np.ones_like(x))
        first_word = int(np.float32([1.0, 2.0]).view(np.uint64)[0])  # x[0:2] + 1 in copy 0 and copy 1 alike
        self.assertEqual(b.fetch_add(0, 0), first_word)
        self.fabric.kill(1)
        got = np.empty_like(x)
        b.read(0, got)
        np.testing.assert_array_equal(got, x + 1)
        self.assertEqual(b.fetch_add(0, 0), first_word)  # the word from the copy that is left
        # compare_swap on a replicated buffer: its copies take it in one order.
        word = int(np.float32([3.0, 4.0]).view(np.uint64)[0])  # x[2:4] + 1
        self.assertEqual(b.compare_swap(8, 5, 6), word)  # no swap
        self.assertEqual(b.compare_swap(8, word, 99), word)  # swapped
        self.assertEqual(b.compare_swap(8, 99, word), 99)  # and back
        b.apply("accumulate", offset=0, x=np.ones_like(x))
        b.write(4, np.float32([7.0]))
        b.read(0, got)
        expected = x + 2
        expected[1] = 7.0
        np.testing.assert_array_equal(got, expected)
        # A new process that lists every server opens it and reads the copies left.
        script = ("import sys, numpy as np, smb\n"
                  "b = smb.Client(servers=sys.argv[1].split(','), timeout=5).open(sys.argv[2])\n"
                  "out = np.empty(b.size // 4, dtype=np.float32)\n"
                  "b.read(0, out)\n"
                  "sys.stdout.write(out.tobytes().hex())\n")
        done = fabric.run_python(script, self.fabric.server_list, b.name)
        self.assertEqual(done.returncode, 0, done.stderr)
        np.testing.assert_array_equal(np.frombuffer(bytes.fromhex(done.stdout), dtype=np.float32), expected)


class RepairTest(fabric.FabricTestCase):
    """Its own fabric: the test restarts one of its servers."""
    SERVERS = 3

    @needs_numpy
    def test_a_restarted_server_gets_its_copies_back(self):
        x = np.arange(3 * STRIPE * 2 // 4, dtype=np.float32)
        names = [self.unique_name() for _ in range(3)]  # some are homed away from the server restarted
        for name in names:
            with self.client.create(name, x.nbytes, stripe_unit=STRIPE, replicas=2) as b:
                b.write(0, x)
        self.fabric.restart(1)
        client = self.new_client()
        kept = [layout.name for layout in client.list() if layout.name in names]
        self.assertTrue(kept)
        holder = self.new_client().open(kept[0])  # open in another client through the repair
        for name in kept:
            report = client.repair(name)
            self.assertEqual(report.name, name)
            self.assertEqual(len(report.repaired), 2)
            self.assertEqual({c.server for c in report.repaired}, {self.fabric.servers[1]})
            self.assertEqual(report.bytes, sum(c.bytes for c in report.repaired))
            self.assertEqual(report.clients_paused, 1 if name == kept[0] else 0)
            self.assertLessEqual(report.paused_seconds, report.seconds)
            self.assertEqual(client.repair(name).repaired, [])  # whole now
            self.assertEqual(client.info(name).stale, [])  # no copy marked behind the others
        holder.write(0, x * 2)  # reaches the rebuilt copies too
        reader = self.new_client().open(kept[0])
        self.fabric.kill(2)  # some stripes are left only in the repaired copies
        got = np.empty_like(x)
        reader.read(0, got)
        np.testing.assert_array_equal(got, x * 2)
        holder.read(0, got)
        np.testing.assert_array_equal(got, x * 2)


class ReplaceServerTest(fabric.FabricTestCase):
    """Its own fabric: the test kills two of its servers."""
    SERVERS = 3

    @needs_numpy
    def test_a_server_lost_for_good_is_replaced_at_a_new_address(self):
        x = np.arange(3 * STRIPE * 2 // 4, dtype=np.float32)
        name = self.unique_name()
        holder = self.client.create(name, x.nbytes, stripe_unit=STRIPE, replicas=2)
        holder.write(0, x)
        self.fabric.kill(0)
        spare = self.fabric.start_spare()
        client = self.new_client()
        with self.assertRaises(smb.InvalidArgument):
            client.replace_server(self.fabric.servers[1], spare)  # alive: refused
        told = client.replace_server(self.fabric.servers[0], spare)
        self.assertEqual(len(told), 3)
        self.assertEqual(client.replaced_servers(), {self.fabric.servers[0]: spare})
        report = client.repair(name)
        self.assertEqual({c.server for c in report.repaired}, {self.fabric.servers[0]})
        holder.write(0, x * 3)  # the holder adopted the copies on the replacement
        self.fabric.kill(1)
        got = np.empty_like(x)
        self.new_client().open(name).read(0, got)  # still lists the lost address
        np.testing.assert_array_equal(got, x * 3)


if __name__ == "__main__":
    fabric.main()
