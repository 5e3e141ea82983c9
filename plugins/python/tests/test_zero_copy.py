#!/usr/bin/python3
"""Zero copy: smb works on the object's own memory (its address is the
object's data pointer), registered memory is read where it is at the time of
each op, and memory that cannot be used in place is refused with
smb.InvalidArgument saying why -- never copied behind the caller's back."""

import fabric
from fabric import needs_numpy, needs_torch, np, smb, torch


class MemoryAddressTest(fabric.FabricTestCase):
    """smb.memory_address needs no server, but the class shares the harness."""

    @needs_numpy
    def test_numpy_address_is_the_arrays_own(self):
        for dtype in (np.float32, np.float64, np.int64, np.uint8, np.float16):
            a = np.arange(1000).astype(dtype)
            self.assertEqual(smb.memory_address(a), a.ctypes.data)
        # A slice with an offset: the address of its first element.
        a = np.arange(1000, dtype=np.float64)
        view = a[10:500]
        self.assertEqual(smb.memory_address(view), view.ctypes.data)
        self.assertEqual(smb.memory_address(view) - smb.memory_address(a), 10 * 8)
        # A 2-D row block is contiguous too.
        grid = np.zeros((10, 10), dtype=np.int32)
        self.assertEqual(smb.memory_address(grid[3:5]), grid[3:5].ctypes.data)

    @needs_torch
    def test_torch_address_is_the_tensors_own(self):
        for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.uint8):
            t = torch.zeros(1000, dtype=dtype)
            self.assertEqual(smb.memory_address(t), t.data_ptr())
            view = t[7:300]  # storage offset 7
            self.assertEqual(smb.memory_address(view), view.data_ptr())
            self.assertEqual(smb.memory_address(view) - t.data_ptr(), 7 * t.element_size())

    def test_bytes_objects(self):
        ba = bytearray(100)
        mv = memoryview(ba)[5:50]
        self.assertEqual(smb.memory_address(mv) - smb.memory_address(ba), 5)

    def test_not_memory(self):
        with self.assertRaises(smb.InvalidArgument) as cm:
            smb.memory_address(42)
        self.assertIn("neither the buffer protocol nor DLPack", str(cm.exception))


class InPlaceTest(fabric.FabricTestCase):
    SERVERS = 2

    @needs_numpy
    def test_write_from_view_then_change_source_after_register(self):
        b = self.client.create(self.unique_name(), 4096, stripe_unit=1024)
        source = np.arange(1000, dtype=np.float64)
        view = source[100:400]  # offset 800 bytes into `source`
        b.write(0, view)
        out = np.empty(300, dtype=np.float64)
        b.read(0, out)
        np.testing.assert_array_equal(out, np.arange(100, 400, dtype=np.float64))

        with self.client.register_memory(source) as registration:
            self.assertTrue(registration.valid)
            source[100:400] = -7.5  # the same memory the view and the registration see
            b.write(0, view)
            received = np.zeros(300, dtype=np.float64)
            with self.client.register_memory(received):
                b.read(0, received)
            np.testing.assert_array_equal(received, np.full(300, -7.5))
            source[250] = 42.0
            b.write(0, view)
            b.read(0, received)
            self.assertEqual(received[150], 42.0)
        self.assertFalse(registration.valid)

    @needs_torch
    def test_read_into_tensor_slice_in_place(self):
        b = self.client.create(self.unique_name(), 4096)
        b.write(0, torch.arange(100, dtype=torch.int64))
        t = torch.full((200,), -1, dtype=torch.int64)
        window = t[50:150]
        b.read(0, window)
        self.assertTrue(torch.equal(t[50:150], torch.arange(100)))
        self.assertTrue(bool((t[:50] == -1).all()) and bool((t[150:] == -1).all()))

    @needs_numpy
    def test_register_read_only_or_empty_memory_refused(self):
        with self.assertRaises(smb.InvalidArgument):
            self.client.register_memory(b"read-only bytes")
        with self.assertRaises(smb.InvalidArgument) as cm:
            self.client.register_memory(bytearray(0))
        self.assertIn("empty", str(cm.exception))

    @needs_numpy
    def test_non_contiguous_numpy_refused(self):
        b = self.client.create(self.unique_name(), 4096)
        strided = np.arange(100, dtype=np.float32)[::2]
        for call in (lambda: b.read(0, strided), lambda: b.write(0, strided),
                     lambda: b.apply("accumulate", x=strided), lambda: smb.memory_address(strided)):
            with self.assertRaises(smb.InvalidArgument) as cm:
                call()
            self.assertIn("not C-contiguous", str(cm.exception))
            self.assertIn("ndarray", str(cm.exception))
        column = np.zeros((8, 8), dtype=np.float64)[:, 1]
        with self.assertRaises(smb.InvalidArgument):
            b.write(0, column)

    def test_non_contiguous_memoryview_refused(self):
        b = self.client.create(self.unique_name(), 4096)
        with self.assertRaises(smb.InvalidArgument) as cm:
            b.write(0, memoryview(bytearray(100))[::3])
        self.assertIn("memoryview", str(cm.exception))

    @needs_numpy
    def test_read_only_memory_refused_for_reads(self):
        b = self.client.create(self.unique_name(), 4096)
        b.write(0, b"\x01" * 4096)
        frozen = np.zeros(16, dtype=np.uint8)
        frozen.flags.writeable = False
        for out, kind in ((b"\x00" * 16, "bytes"), (frozen, "ndarray"),
                          (memoryview(b"\x00" * 16), "memoryview")):
            with self.subTest(kind=kind):
                with self.assertRaises(smb.InvalidArgument) as cm:
                    b.read(0, out)
                message = str(cm.exception)
                self.assertIn(kind, message)
                self.assertIn("writable", message)
                with self.assertRaises(smb.InvalidArgument):
                    b.read_async(0, out)
        self.assertFalse(frozen.any(), "a refused read wrote into read-only memory")
        # Read-only memory is fine to write from.
        b.write(0, frozen)
        self.assertEqual(bytes(b.read(0, size=16)), bytes(16))

    @needs_torch
    def test_non_contiguous_tensor_refused(self):
        b = self.client.create(self.unique_name(), 4096)
        t = torch.arange(64, dtype=torch.float32).reshape(8, 8).t()
        for call in (lambda: b.read(0, t), lambda: b.write(0, t)):
            with self.assertRaises(smb.InvalidArgument) as cm:
                call()
            self.assertIn("non-contiguous Tensor", str(cm.exception))
            self.assertIn(".contiguous()", str(cm.exception))
        b.write(0, t.contiguous())  # the fix the message names works

    @needs_torch
    def test_tensor_requiring_grad_is_a_clear_error(self):
        # torch does not export a tensor that requires grad (DLPack); smb says
        # so as smb.InvalidArgument (a ValueError), with torch's hint.
        b = self.client.create(self.unique_name(), 4096)
        p = torch.ones(16, requires_grad=True)
        for call in (lambda: b.write(0, p), lambda: b.read(0, p), lambda: b.write_async(0, p),
                     lambda: b.apply("accumulate", x=p)):
            with self.assertRaises(smb.InvalidArgument) as cm:
                call()
            self.assertIn("Tensor", str(cm.exception))
            self.assertIn("detach()", str(cm.exception))
            self.assertIsInstance(cm.exception, ValueError)
        # The documented way round it: detach (shares the memory, no copy).
        b.write(0, p.detach())
        self.assertEqual(smb.memory_address(p.detach()), p.data_ptr())
        out = torch.zeros(16)
        b.read(0, out)
        self.assertTrue(torch.equal(out, torch.ones(16)))
        self.assertIsNone(p.grad)

    @needs_torch
    def test_bool_tensor_is_a_clear_error(self):
        b = self.client.create(self.unique_name(), 4096)
        with self.assertRaises(smb.InvalidArgument) as cm:
            b.write(0, torch.ones(8, dtype=torch.bool))
        self.assertIn("Tensor", str(cm.exception))


if __name__ == "__main__":
    fabric.main()
