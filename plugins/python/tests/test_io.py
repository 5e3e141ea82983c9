#!/usr/bin/python3
"""Writes and reads through the smb package: every kind of Python memory,
over 1 and 3 servers, striped (small stripes, odd sizes, offsets that cross
stripes), synchronous and asynchronous."""

import random
import time

import fabric
from fabric import needs_numpy, needs_torch, np, smb, torch

STRIPE = 4096


class RoundTripMixin:
    """The same tests over a fabric of SERVERS smbd."""

    def make(self, size, stripe_unit=STRIPE):
        return self.client.create(self.unique_name(), size, stripe_unit=stripe_unit)

    def test_bytes_bytearray_memoryview(self):
        b = self.make(3 * STRIPE * 2 + 5)
        data = bytes(random.Random(1).randrange(256) for _ in range(b.size))
        b.write(0, data)
        self.assertEqual(bytes(b.read(0)), data)

        ba = bytearray(data[::-1])
        b.write(0, ba)
        out = bytearray(b.size)
        self.assertIs(b.read(0, out), out)
        self.assertEqual(out, ba)

        mv = memoryview(bytearray(b"0123456789" * 1000))[17:17 + 2 * STRIPE + 3]
        b.write(STRIPE - 11, mv)
        got = bytearray(len(mv))
        b.read(STRIPE - 11, memoryview(got))
        self.assertEqual(got, mv.tobytes())

    def test_read_without_out_returns_a_bytearray(self):
        b = self.make(2 * STRIPE + 3)
        b.write(0, b"\x07" * b.size)
        whole = b.read(0)
        self.assertIsInstance(whole, bytearray)
        self.assertEqual(len(whole), b.size)
        tail = b.read(STRIPE + 1)
        self.assertEqual(tail, bytearray(b"\x07" * (STRIPE + 2)))
        part = b.read(5, size=10)
        self.assertIsInstance(part, bytearray)
        self.assertEqual(part, bytearray(b"\x07" * 10))
        self.assertEqual(b.read(b.size), bytearray())

    def test_offsets_crossing_stripes_odd_sizes(self):
        size = 3 * STRIPE * 4 + 13
        b = self.make(size)
        model = bytearray(size)
        b.write(0, model)
        rng = random.Random(1234)
        cases = [(0, size), (STRIPE - 1, 2), (STRIPE - 3, STRIPE * 4 + 7), (size - 1, 1), (size - 13, 13), (1, size - 1)]
        cases += [(rng.randrange(size), None) for _ in range(20)]
        for offset, length in cases:
            if length is None:
                length = rng.randrange(1, size - offset + 1)
            data = bytes(rng.randrange(256) for _ in range(length))
            b.write(offset, data)
            model[offset:offset + length] = data
            with self.subTest(offset=offset, length=length):
                self.assertEqual(bytes(b.read(offset, size=length)), data)
        self.assertEqual(b.read(0), model)
        # Reads at odd offsets and lengths of what is there.
        for _ in range(20):
            offset = rng.randrange(size)
            length = rng.randrange(size - offset + 1)
            self.assertEqual(b.read(offset, size=length), model[offset:offset + length])

    def test_larger_than_one_stripe_default_unit(self):
        # The default 1 MiB stripe unit: 3 MiB + a bit spans every server.
        size = 3 * (1 << 20) + 4097
        b = self.client.create(self.unique_name(), size)
        data = bytes(random.Random(5).getrandbits(8) for _ in range(1 << 12)) * (size // (1 << 12) + 1)
        b.write(0, memoryview(data)[:size])
        self.assertEqual(bytes(b.read(0)), data[:size])
        self.assertEqual(sum(b.layout.shares), size)

    @needs_numpy
    def test_numpy_dtypes(self):
        b = self.make(3 * STRIPE * 3 + 8)
        for dtype in (np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64, np.uint8,
                      np.uint16, np.uint32, np.uint64, np.complex64, np.bool_):
            with self.subTest(dtype=np.dtype(dtype).name):
                count = b.size // np.dtype(dtype).itemsize - 1
                rng = np.random.default_rng(7)
                src = rng.integers(0, 100, count).astype(dtype)
                if np.dtype(dtype).kind == "f":
                    src = (rng.standard_normal(count) * 1000).astype(dtype)
                offset = np.dtype(dtype).itemsize  # not stripe-aligned
                b.write(offset, src)
                out = np.empty_like(src)
                self.assertIs(b.read(offset, out), out)
                np.testing.assert_array_equal(out, src)
                # 2-D, C-contiguous.
                grid = src[: (count // 4) * 4].reshape(4, -1)
                b.write(0, grid)
                out2 = np.zeros_like(grid)
                b.read(0, out2)
                np.testing.assert_array_equal(out2, grid)

    @needs_torch
    def test_torch_dtypes(self):
        b = self.make(3 * STRIPE * 3 + 24)
        for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.uint8):
            with self.subTest(dtype=str(dtype)):
                itemsize = torch.empty(0, dtype=dtype).element_size()
                count = b.size // itemsize - 3
                gen = torch.Generator().manual_seed(3)
                if dtype.is_floating_point:
                    src = (torch.randn(count, generator=gen, dtype=torch.float64) * 100).to(dtype)
                else:
                    src = torch.randint(0, 200, (count,), generator=gen).to(dtype)
                b.write(3 * itemsize, src)
                out = torch.zeros(count, dtype=dtype)
                self.assertIs(b.read(3 * itemsize, out), out)
                self.assertTrue(torch.equal(out, src), f"{dtype} round trip differs")
                # The same bytes, read as a bytearray.
                raw = b.read(3 * itemsize, size=count * itemsize)
                expected = src.view(torch.uint8) if dtype != torch.uint8 else src
                self.assertEqual(bytes(raw), bytes(expected.numpy().tobytes()) if np is not None
                                 else bytes(expected.tolist()))

    @needs_torch
    @needs_numpy
    def test_torch_written_numpy_read_and_back(self):
        b = self.make(3 * STRIPE + 64)
        t = torch.arange(b.size // 4, dtype=torch.float32) * 0.5
        b.write(0, t)
        a = np.empty(b.size // 4, dtype=np.float32)
        b.read(0, a)
        np.testing.assert_array_equal(a, t.numpy())
        b.write(0, (a * 2).astype(np.float32))
        t2 = torch.empty_like(t)
        b.read(0, t2)
        self.assertTrue(torch.equal(t2, t * 2))
        # bfloat16 has no numpy type: compare its bits through int16.
        bf = torch.linspace(-3, 3, 1000).to(torch.bfloat16)
        b.write(16, bf)
        bits = np.empty(1000, dtype=np.int16)
        b.read(16, bits)
        np.testing.assert_array_equal(bits, bf.view(torch.int16).numpy())

    @needs_numpy
    def test_async_write_read_wait_and_done(self):
        b = self.make(3 * STRIPE * 2)
        src = np.arange(b.size // 8, dtype=np.int64)
        w = b.write_async(0, src)
        w.wait(timeout=10)
        self.assertTrue(w.done())
        w.wait()  # again: no-op once done
        out = np.zeros_like(src)
        r = b.read_async(0, out)
        deadline = time.monotonic() + 10
        while not r.done():
            self.assertLess(time.monotonic(), deadline, "read_async not done within 10 s")
            time.sleep(0.001)
        np.testing.assert_array_equal(out, src)
        r.wait()
        self.assertTrue(r.done())

    @needs_numpy
    def test_async_keeps_its_memory_alive(self):
        # The request holds the only reference to the source array.
        b = self.make(2 * STRIPE)
        req = b.write_async(0, np.full(b.size // 4, 3, dtype=np.int32))
        req.wait(timeout=10)
        self.assertTrue((np.frombuffer(b.read(0), dtype=np.int32) == 3).all())
        # A request dropped before it was waited for completes first.
        b.write_async(0, np.full(b.size // 4, 4, dtype=np.int32))
        self.assertTrue((np.frombuffer(b.read(0), dtype=np.int32) == 4).all())

    @needs_numpy
    def test_many_async_requests_in_flight(self):
        chunk, chunks = 1000, 200  # chunks straddle stripes
        b = self.make(chunk * chunks)
        sources = [np.full(chunk, i % 251, dtype=np.uint8) for i in range(chunks)]
        writes = [b.write_async(i * chunk, sources[i]) for i in range(chunks)]
        for w in writes:
            w.wait(timeout=10)
        outs = [np.empty(chunk, dtype=np.uint8) for _ in range(chunks)]
        reads = [b.read_async(i * chunk, outs[i]) for i in range(chunks)]
        for r in reads:
            r.wait(timeout=10)
        for i in range(chunks):
            self.assertTrue((outs[i] == i % 251).all(), f"chunk {i}")
        self.assertTrue(all(r.done() for r in reads + writes))


class OneServerIOTest(RoundTripMixin, fabric.FabricTestCase):
    SERVERS = 1


class ThreeServerIOTest(RoundTripMixin, fabric.FabricTestCase):
    SERVERS = 3
    CAPACITY = "128M"

    def test_striped_over_every_server(self):
        b = self.make(3 * STRIPE * 2 + 1)
        self.assertEqual(sorted(b.layout.servers), sorted(self.fabric.servers))
        self.assertEqual(b.layout.stripe_unit, STRIPE)
        self.assertEqual(sum(b.layout.shares), b.size)
        # Another client (and handle) sees the bytes.
        data = bytes(range(256)) * (b.size // 256) + bytes(b.size % 256)
        b.write(0, data)
        other = self.new_client().open(b.name)
        self.assertEqual(other.size, b.size)
        self.assertEqual(bytes(other.read(0)), data)

    def test_servers_from_environment(self):
        import os
        saved = os.environ.get("SMB_SERVERS")
        os.environ["SMB_SERVERS"] = self.fabric.server_list
        try:
            c = smb.Client(timeout=fabric.CLIENT_TIMEOUT)
        finally:
            if saved is None:
                del os.environ["SMB_SERVERS"]
            else:
                os.environ["SMB_SERVERS"] = saved
        self.assertEqual(sorted(c.servers), sorted(self.fabric.servers))
        c.create(self.unique_name(), 100).write(0, b"x" * 100)


if __name__ == "__main__":
    fabric.main()
