#!/usr/bin/python3
"""Server-side vector ops through the package (apply, apply_from), the
buffer version and wait_version, woken by another thread or process."""

import subprocess
import sys
import threading
import time

import fabric
from fabric import needs_numpy, needs_torch, np, smb, torch

STRIPE = 4096


class VectorOpTest(fabric.FabricTestCase):
    SERVERS = 3
    CAPACITY = "128M"

    def make(self, size):
        return self.client.create(self.unique_name(), size, stripe_unit=STRIPE)

    def read_as(self, b, dtype, count, offset=0):
        out = np.empty(count, dtype=dtype)
        b.read(offset, out)
        return out

    @needs_numpy
    def test_float32_ops_dtype_inferred_from_numpy(self):
        n = 5000  # 20000 bytes: over every server, not stripe-aligned at the end
        b = self.make(n * 4)
        y = np.arange(n, dtype=np.float32)
        b.write(0, y)
        b.apply("accumulate", x=np.ones(n, np.float32))
        expected = y + 1
        np.testing.assert_array_equal(self.read_as(b, np.float32, n), expected)
        b.apply("axpy", x=np.full(n, 4, np.float32), alpha=0.25)
        expected = expected + 1
        np.testing.assert_array_equal(self.read_as(b, np.float32, n), expected)
        b.apply("scale", "f32", count=n, alpha=-2.0)  # no x: dtype and count given
        expected = expected * -2
        np.testing.assert_array_equal(self.read_as(b, np.float32, n), expected)
        b.apply("min", x=np.full(n, -100, np.float32))
        expected = np.minimum(expected, -100)
        np.testing.assert_array_equal(self.read_as(b, np.float32, n), expected)
        b.apply("max", x=np.full(n, -5000, np.float32))
        expected = np.maximum(expected, -5000)
        np.testing.assert_array_equal(self.read_as(b, np.float32, n), expected)
        b.apply("product", x=np.full(n, 0.5, np.float32))
        expected = expected * np.float32(0.5)
        np.testing.assert_array_equal(self.read_as(b, np.float32, n), expected)
        b.apply("copy", x=np.full(n, 9, np.float32))
        np.testing.assert_array_equal(self.read_as(b, np.float32, n), np.full(n, 9, np.float32))

    @needs_numpy
    def test_part_of_a_buffer_at_an_offset(self):
        n = 3000
        b = self.make(n * 8)
        b.write(0, np.zeros(n, np.float64))
        # 1000 elements starting inside the first stripe, crossing two stripe ends.
        b.apply("accumulate", offset=8 * 500, x=np.full(1000, 2.5, np.float64))
        got = self.read_as(b, np.float64, n)
        expected = np.zeros(n)
        expected[500:1500] = 2.5
        np.testing.assert_array_equal(got, expected)
        b.apply("scale", np.float64, offset=8 * 1000, count=10, alpha=4)  # numpy type as dtype
        expected[1000:1010] *= 4
        np.testing.assert_array_equal(self.read_as(b, np.float64, n), expected)

    @needs_numpy
    def test_integer_ops_are_exact(self):
        n = 3000
        b = self.make(n * 8)
        big = np.arange(n, dtype=np.int64) * (1 << 40) + 1  # beyond float64's exact integers
        b.write(0, big)
        b.apply("accumulate", x=np.full(n, 3, np.int64))
        np.testing.assert_array_equal(self.read_as(b, np.int64, n), big + 3)
        b.apply("product", x=np.full(n, -1, np.int64))
        np.testing.assert_array_equal(self.read_as(b, np.int64, n), -(big + 3))
        b.apply("max", x=np.full(n, -(1 << 50), np.int64))
        np.testing.assert_array_equal(self.read_as(b, np.int64, n), np.maximum(-(big + 3), -(1 << 50)))

        i32 = np.arange(2 * n, dtype=np.int32) - n
        b.write(0, i32)
        b.apply("accumulate", x=np.full(2 * n, 2_000_000_000 // 3, np.int32))
        np.testing.assert_array_equal(self.read_as(b, np.int32, 2 * n), i32 + 2_000_000_000 // 3)
        b.apply("min", x=np.zeros(2 * n, np.int32) + 666_666_000)
        np.testing.assert_array_equal(self.read_as(b, np.int32, 2 * n),
                                      np.minimum(i32 + 2_000_000_000 // 3, 666_666_000))

    @needs_torch
    def test_dtype_inferred_from_torch(self):
        n = 2048
        b = self.make(n * 8)
        for dtype in (torch.float32, torch.float64, torch.int32, torch.int64):
            with self.subTest(dtype=str(dtype)):
                y = torch.arange(n).to(dtype)
                b.write(0, y)
                b.apply("accumulate", x=torch.full((n,), 3).to(dtype))
                b.apply("product", x=torch.full((n,), 2).to(dtype))
                out = torch.empty(n, dtype=dtype)
                b.read(0, out)
                self.assertTrue(torch.equal(out, (y + 3) * 2))
        # Half precision: small integers are exact.
        for dtype in (torch.float16, torch.bfloat16):
            with self.subTest(dtype=str(dtype)):
                y = torch.arange(64).to(dtype)
                b.write(0, y)
                b.apply("accumulate", x=torch.ones(64, dtype=dtype))
                out = torch.empty(64, dtype=dtype)
                b.read(0, out)
                self.assertTrue(torch.equal(out, y + 1))

    @needs_numpy
    def test_apply_from_another_buffer_striped_alike(self):
        n = 4000
        target = self.make(n * 4)
        source = self.make(n * 4)
        self.assertEqual(target.layout.servers, source.layout.servers)
        target.write(0, np.full(n, 1, np.float32))
        source.write(0, np.arange(n, dtype=np.float32))
        target.apply_from("axpy", source, np.float32, alpha=2.0)
        np.testing.assert_array_equal(self.read_as(target, np.float32, n), 1 + 2 * np.arange(n, dtype=np.float32))
        target.apply_from("copy", source, "f32", count=100)
        got = self.read_as(target, np.float32, n)
        np.testing.assert_array_equal(got[:100], np.arange(100, dtype=np.float32))
        np.testing.assert_array_equal(got[100:], 1 + 2 * np.arange(100, n, dtype=np.float32))
        # x must lie on the same servers: a shift that is not a multiple of
        # stripe unit x servers is refused, naming the rule.
        with self.assertRaises(smb.InvalidArgument) as cm:
            target.apply_from("accumulate", source, "f32", offset=4, count=10)
        self.assertIn("stripe unit", str(cm.exception))
        other = self.client.create(self.unique_name(), n * 4, stripe_unit=2 * STRIPE)
        with self.assertRaises(smb.InvalidArgument) as cm:
            target.apply_from("accumulate", other, "f32", count=10)
        self.assertIn("not striped like", str(cm.exception))

    @needs_numpy
    def test_apply_argument_errors(self):
        b = self.make(4096)
        x = np.ones(4, np.float32)
        for call, words in (
                (lambda: b.apply("fma", x=x), "unknown vector op 'fma'"),
                (lambda: b.apply("accumulate", "f128", x=x), "f128"),
                (lambda: b.apply("accumulate", x=np.ones(4, np.uint16)), "give dtype"),
                (lambda: b.apply("scale", alpha=2), "give dtype"),
                (lambda: b.apply("scale", "f32", alpha=2), "give count"),
                (lambda: b.apply("accumulate", "f32", offset=2, x=x), "multiple of the element size"),
                (lambda: b.apply("accumulate", "f32", count=100, x=x), "x has 16 bytes"),
                (lambda: b.apply_from("bogus", b, "f32", count=1), "unknown vector op")):
            with self.subTest(words=words):
                with self.assertRaises(smb.InvalidArgument) as cm:
                    call()
                self.assertIn(words, str(cm.exception))
                self.assertEqual(cm.exception.code, "invalid_argument")
        with self.assertRaises(smb.OutOfRange):
            b.apply("accumulate", "f32", offset=4096 - 4, x=x)

    @needs_numpy
    def test_version_advances_with_ops_over_the_whole_buffer(self):
        b = self.make(3 * STRIPE * 2)
        v0 = b.version()
        b.apply("accumulate", x=np.ones(b.size // 4, np.float32))
        self.assertEqual(b.version(), v0 + 1)
        b.apply("scale", "f32", count=b.size // 4, alpha=1.0)
        self.assertEqual(b.version(), v0 + 2)
        self.assertEqual(b.wait_version(v0 + 2, timeout=5), v0 + 2)  # already there: returns at once
        # An op on one stripe leaves the least version over the servers.
        b.apply("scale", "f32", count=1, alpha=1.0)
        self.assertEqual(b.version(), v0 + 2)
        self.assertEqual(self.client.open(b.name).version(), v0 + 2)

    @needs_numpy
    def test_wait_version_woken_by_another_thread(self):
        b = self.make(3 * STRIPE)
        target = b.version() + 1
        bumper = self.new_client().open(b.name)
        waiting = threading.Event()

        def waiter():
            waiting.set()
            return b.wait_version(target, timeout=30)

        def bump():
            self.assertTrue(waiting.wait(30))
            bumper.apply("accumulate", x=np.ones(b.size // 4, np.float32))

        reached, _ = self.run_threads([waiter, bump])
        self.assertGreaterEqual(reached, target)

    @needs_numpy
    def test_wait_version_woken_by_another_process(self):
        b = self.make(3 * STRIPE)
        target = b.version() + 1
        code = (
            "import sys, smb, numpy as np\n"
            "c = smb.Client(servers=sys.argv[1], timeout=5)\n"
            "b = c.open(sys.argv[2])\n"
            "print('opened', flush=True)\n"
            "sys.stdin.readline()\n"
            "b.apply('accumulate', x=np.ones(b.size // 4, np.float32))\n")
        child = subprocess.Popen([sys.executable, "-c", code, self.fabric.server_list, b.name], env=fabric.child_env(),
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(child.stdout.readline().strip(), "opened")
            result = {}

            def waiter():
                result["version"] = b.wait_version(target, timeout=30)

            t = threading.Thread(target=waiter, daemon=True)
            t.start()
            child.stdin.write("go\n")
            child.stdin.flush()
            self.assertEqual(child.wait(timeout=30), 0)
            t.join(30)
            self.assertFalse(t.is_alive(), "wait_version was not woken by the other process")
            self.assertGreaterEqual(result["version"], target)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            child.stdin.close()
            child.stdout.close()

    def test_wait_version_timeout_raises_smb_timeout(self):
        b = self.make(4096)
        start = time.monotonic()
        with self.assertRaises(smb.Timeout) as cm:
            b.wait_version(b.version() + 1, timeout=0.3)
        took = time.monotonic() - start
        self.assertIsInstance(cm.exception, TimeoutError)
        self.assertIsInstance(cm.exception, smb.Error)
        self.assertEqual(cm.exception.code, "timeout")
        self.assertIn(b.name, str(cm.exception))
        self.assertGreaterEqual(took, 0.25)
        self.assertLess(took, 10)
        with self.assertRaises(smb.InvalidArgument):
            b.wait_version(1, timeout=0)


if __name__ == "__main__":
    fabric.main()
