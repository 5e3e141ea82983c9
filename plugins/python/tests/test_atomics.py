#!/usr/bin/python3
"""64-bit atomics on buffer words (fetch_add, compare_swap), alone and from
several threads and clients at once."""

import fabric
from fabric import smb

WORD = 1 << 64
THREADS = 4


class AtomicsTest(fabric.FabricTestCase):
    SERVERS = 3
    CAPACITY = "128M"

    def make(self, size=3 * 4096):
        return self.client.create(self.unique_name(), size, stripe_unit=4096)

    def test_fetch_add_returns_the_old_value(self):
        b = self.make()
        for offset in (0, 8, 4096, 2 * 4096 + 8):  # a word on every server
            self.assertEqual(b.fetch_add(offset, 5), 0)
            self.assertEqual(b.fetch_add(offset, 7), 5)
            self.assertEqual(b.fetch_add(offset, 0), 12)
        # The word is the buffer's bytes (little-endian u64).
        self.assertEqual(int.from_bytes(b.read(4096, size=8), "little"), 12)

    def test_fetch_add_wraps_and_takes_negative_values(self):
        b = self.make()
        self.assertEqual(b.fetch_add(0, WORD - 1), 0)
        self.assertEqual(b.fetch_add(0, 2), WORD - 1)  # wraps modulo 2**64
        self.assertEqual(b.fetch_add(0, 0), 1)
        self.assertEqual(b.fetch_add(0, -1), 1)  # subtracts
        self.assertEqual(b.fetch_add(0, -1), 0)
        self.assertEqual(b.fetch_add(0, 0), WORD - 1)
        with self.assertRaises(smb.InvalidArgument):
            b.fetch_add(0, WORD)
        with self.assertRaises(TypeError):
            b.fetch_add(0, 1.5)

    def test_compare_swap(self):
        b = self.make()
        self.assertEqual(b.compare_swap(8, 0, 42), 0)    # swapped
        self.assertEqual(b.compare_swap(8, 0, 43), 42)   # not: returns what is there
        self.assertEqual(b.fetch_add(8, 0), 42)
        self.assertEqual(b.compare_swap(8, 42, WORD - 1), 42)
        self.assertEqual(b.compare_swap(8, -1, 7), WORD - 1)  # -1 is the all-ones word
        self.assertEqual(b.fetch_add(8, 0), 7)

    def test_misaligned_and_out_of_range_words(self):
        b = self.make()
        with self.assertRaises(smb.InvalidArgument) as cm:
            b.fetch_add(3, 1)
        self.assertIn("8-byte aligned", str(cm.exception))
        self.assertIn(b.name, str(cm.exception))
        with self.assertRaises(smb.OutOfRange) as cm:
            b.compare_swap(b.size, 0, 1)
        self.assertIn(b.name, str(cm.exception))

    def test_fetch_add_from_threads_loses_nothing(self):
        b = self.make()
        per_thread = 300
        clients = [self.client, self.client, self.new_client(), self.new_client()]  # shared and own clients
        handles = [c.open(b.name) if c is not self.client else b for c in clients]

        def adder(handle):
            return [handle.fetch_add(4096, 1) for _ in range(per_thread)]

        results = self.run_threads([lambda h=h: adder(h) for h in handles])
        olds = sorted(v for r in results for v in r)
        # Every old value seen exactly once: no two adds saw the same word.
        self.assertEqual(olds, list(range(THREADS * per_thread)))
        self.assertEqual(b.fetch_add(4096, 0), THREADS * per_thread)

    def test_compare_swap_from_threads(self):
        # A CAS-loop counter: every successful swap is one increment.
        b = self.make()
        per_thread = 100

        def incrementer(handle):
            retries = 0
            for _ in range(per_thread):
                while True:
                    seen = handle.fetch_add(16, 0)
                    if handle.compare_swap(16, seen, seen + 1) == seen:
                        break
                    retries += 1
            return retries

        handles = [b] + [self.new_client().open(b.name) for _ in range(THREADS - 1)]
        self.run_threads([lambda h=h: incrementer(h) for h in handles])
        self.assertEqual(b.fetch_add(16, 0), THREADS * per_thread)


if __name__ == "__main__":
    fabric.main()
