#!/usr/bin/python3
"""Checkpoints from Python: Client.save / Client.load / smb.read_checkpoint
round-trip a buffer onto other servers, a damaged file raises InvalidArgument
and creates nothing, and UpdateEngine resumes its global weights from
save_checkpoint's file."""

import os
import tempfile

import fabric
from fabric import needs_numpy, np, smb


class CheckpointTest(fabric.FabricTestCase):
    SERVERS = 2
    CAPACITY = "64M"

    def setUp(self):
        super().setUp()
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def test_round_trip_onto_another_server(self):
        name = self.unique_name()
        data = bytes(range(256)) * 100 + b"tail"
        self.client.create(name, len(data), stripe_unit=4096).write(0, data)
        info = self.client.save(name, self.path("b.ckpt"))
        self.assertEqual((info.name, info.size, info.stripe_unit), (name, len(data), 4096))
        self.assertEqual(smb.read_checkpoint(self.path("b.ckpt")).checksum, info.checksum)
        copy = self.client.load(self.path("b.ckpt"), name + "-copy", servers=[self.fabric.servers[1]])
        self.assertEqual(copy.layout.servers, [self.fabric.servers[1]])
        self.assertEqual(bytes(self.new_client().open(name + "-copy").read(0, size=len(data))), data)

    def test_damaged_file_raises_and_creates_nothing(self):
        name = self.unique_name()
        self.client.create(name, 8192).write(0, b"\x01" * 8192)
        self.client.save(name, self.path("good.ckpt"))
        with open(self.path("good.ckpt"), "rb") as f:
            raw = bytearray(f.read())
        raw[len(raw) // 2] ^= 0xFF
        with open(self.path("bad.ckpt"), "wb") as f:
            f.write(raw)
        with self.assertRaises(smb.InvalidArgument) as cm:
            self.client.load(self.path("bad.ckpt"), name + "-copy")
        self.assertIn("checksum mismatch", str(cm.exception))
        with self.assertRaises(smb.NotFound):
            self.client.open(name + "-copy")

    @needs_numpy
    def test_engine_resumes_from_a_checkpoint(self):
        n = 2000
        weights = np.arange(n, dtype=np.float32)
        first = smb.UpdateEngine(self.new_client(), self.unique_name("run"), n, mode="sync", timeout=30)
        first.initialize(weights)
        first.save_checkpoint(self.path("engine.ckpt"))
        resumed = smb.UpdateEngine(self.new_client(), self.unique_name("run"), n, mode="sync", timeout=30,
                                   resume_from=self.path("engine.ckpt"))
        start = np.zeros(n, np.float32)
        resumed.initialize(start)
        np.testing.assert_array_equal(start, weights)


if __name__ == "__main__":
    fabric.main()
