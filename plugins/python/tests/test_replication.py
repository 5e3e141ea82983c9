#!/usr/bin/python3
"""Replicated buffers through the smb package: two copies of every stripe
over 3 smbd, one of which is killed (SIGKILL); the open buffer keeps its
bytes and takes writes, accumulates and fetch_adds."""

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
        b.apply("accumulate", offset=0, x=np.ones_like(x))
        b.write(4, np.float32([7.0]))
        b.read(0, got)
        expected = x + 2
        expected[1] = 7.0
        np.testing.assert_array_equal(got, expected)


if __name__ == "__main__":
    fabric.main()
