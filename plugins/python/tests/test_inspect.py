#!/usr/bin/python3
"""What the fabric says about itself: status(), list(), info(), a buffer's
layout, describe_paths(); buffer lifetime (close, destroy); the element type
helpers (dtype_name, element_size)."""

import fabric
from fabric import needs_numpy, needs_torch, np, smb, torch


class InspectTest(fabric.FabricTestCase):
    SERVERS = 3
    CAPACITY = "64M"

    def test_status_fields(self):
        name = self.unique_name()
        b = self.client.create(name, 3 * 4096, stripe_unit=4096)  # an open handle on each server
        status = self.client.status()
        self.assertEqual(sorted(s.address for s in status), sorted(self.fabric.servers))
        for s in status:
            with self.subTest(server=s.address):
                self.assertIsInstance(s.transport, str)
                self.assertTrue(s.transport)
                self.assertEqual(s.capacity, 64 << 20)
                self.assertGreaterEqual(s.used, 4096)
                self.assertTrue(s.reachable, s.error)
                self.assertNotEqual(s.instance, 0)
                self.assertLessEqual(s.used + s.largest_free, s.capacity)
                self.assertIsInstance(s.huge_pages, bool)
                # smbd faults its pool in behind its first answers
                self.assertLessEqual(s.populated, s.capacity)
                self.assertGreaterEqual(s.clients, 1)
                ours = [x for x in s.buffers if x.name == name]
                self.assertEqual(len(ours), 1, f"{name} not listed on {s.address}")
                self.assertEqual(ours[0].bytes, 4096)
                self.assertGreaterEqual(ours[0].open_handles, 1)
        b.close()
        for s in self.client.status():
            self.assertEqual([x.open_handles for x in s.buffers if x.name == name], [0])

    def test_list_and_info(self):
        name = self.unique_name()
        size = 5 * 4096 + 100
        b = self.client.create(name, size, stripe_unit=4096)
        listed = {layout.name: layout for layout in self.client.list()}
        self.assertIn(name, listed)
        for layout in (listed[name], self.client.info(name), b.layout, self.new_client().open(name).layout):
            with self.subTest(layout=repr(layout)):
                self.assertEqual(layout.name, name)
                self.assertEqual(layout.size, size)
                self.assertEqual(layout.stripe_unit, 4096)
                self.assertEqual(sorted(layout.servers), sorted(self.fabric.servers))
                self.assertEqual(len(layout.shares), 3)
                self.assertEqual(sum(layout.shares), size)
                # Stripe i lives on servers[i % 3]: 6 stripes, the last one short.
                self.assertEqual(layout.shares, [2 * 4096, 2 * 4096, 4096 + 100])
                self.assertIn(name, repr(layout))

    def test_buffer_on_chosen_servers(self):
        chosen = self.fabric.servers[:2]
        b = self.client.create(self.unique_name(), 4 * 4096, stripe_unit=4096, servers=chosen)
        self.assertEqual(sorted(b.layout.servers), sorted(chosen))
        self.assertEqual(b.layout.shares, [2 * 4096, 2 * 4096])
        self.assertEqual(repr(b), f"smb.Buffer(name={b.name!r}, size={4 * 4096})")

    def test_describe_paths(self):
        paths = self.client.describe_paths()
        self.assertEqual(len(paths), 3)
        for line in paths:
            self.assertIsInstance(line, str)
        self.assertTrue(any(s in " ".join(paths) for s in self.fabric.servers))

    def test_close_and_destroy(self):
        name = self.unique_name()
        with self.client.create(name, 4096) as b:
            b.write(0, b"kept")
        # Closing a handle keeps the buffer; destroy removes it everywhere.
        self.assertEqual(bytes(self.client.open(name).read(0, size=4)), b"kept")
        self.client.destroy(name)
        self.assertNotIn(name, [layout.name for layout in self.client.list()])
        with self.assertRaises(smb.NotFound):
            self.client.open(name)

    def test_open_or_create(self):
        name = self.unique_name()
        first = self.client.open_or_create(name, 8192)
        first.write(0, b"first")
        second = self.new_client().open_or_create(name, 8192)
        self.assertEqual(bytes(second.read(0, size=5)), b"first")

    def test_servers_property(self):
        # The client's order is its own (the same for every client), not the caller's.
        expected = sorted(self.fabric.servers)
        self.assertEqual(sorted(self.client.servers), expected)
        reverse = smb.Client(servers=list(reversed(self.fabric.servers)), timeout=5)
        self.assertEqual(sorted(reverse.servers), expected)
        self.assertEqual(reverse.servers, self.client.servers)


class DtypeHelpersTest(fabric.FabricTestCase):
    SERVERS = 1
    CAPACITY = "16M"

    def test_names(self):
        for spelling, name in (("f32", "f32"), ("float32", "f32"), ("float", "f32"), ("double", "f64"),
                               ("half", "f16"), ("bfloat16", "bf16"), ("uint8", "u8"), ("bool", "u8"),
                               ("int", "i32"), ("long", "i64"), ("short", "i16")):
            self.assertEqual(smb.dtype_name(spelling), name)
        self.assertEqual([smb.element_size(d) for d in smb.DTYPES], [4, 8, 2, 2, 1, 1, 2, 4, 8])
        self.assertIn("accumulate", smb.OPS)
        with self.assertRaises(smb.InvalidArgument):
            smb.dtype_name(3.5)

    @needs_numpy
    def test_numpy_types(self):
        self.assertEqual(smb.dtype_name(np.float32), "f32")
        self.assertEqual(smb.dtype_name(np.dtype("int64")), "i64")
        self.assertEqual(smb.dtype_name(np.float16), "f16")
        self.assertEqual(smb.element_size(np.int16), 2)
        with self.assertRaises(smb.InvalidArgument) as cm:
            smb.dtype_name(np.uint16)
        self.assertIn("no smb equivalent", str(cm.exception))

    @needs_torch
    def test_torch_types(self):
        self.assertEqual(smb.dtype_name(torch.float32), "f32")
        self.assertEqual(smb.dtype_name(torch.bfloat16), "bf16")
        self.assertEqual(smb.dtype_name(torch.int64), "i64")
        self.assertEqual(smb.element_size(torch.float16), 2)
        with self.assertRaises(smb.InvalidArgument):
            smb.dtype_name(torch.complex64)


if __name__ == "__main__":
    fabric.main()
