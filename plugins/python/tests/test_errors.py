#!/usr/bin/python3
"""Every smb exception class, raised by the failure that should raise it
against real servers; codes, messages and builtin bases."""

import os
import pickle
import socket
import tempfile
import time
import unittest

import fabric
from fabric import needs_numpy, np, smb


def free_loopback_port():
    """A port nothing listens on (bound, then closed again)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ErrorClassesTest(fabric.FabricTestCase):
    SERVERS = 2
    CAPACITY = "64M"

    def check(self, error, cls, code, *names):
        """`error` is exactly `cls`, an smb.Error with `code`, naming `names`."""
        self.assertIs(type(error), cls)
        self.assertIsInstance(error, smb.Error)
        self.assertEqual(error.code, code)
        for name in names:
            self.assertIn(name, str(error))

    def test_not_found(self):
        name = self.unique_name("missing")
        with self.assertRaises(smb.NotFound) as cm:
            self.client.open(name)
        self.check(cm.exception, smb.NotFound, "not_found", name)
        self.assertIsInstance(cm.exception, LookupError)
        self.assertTrue(any(s in str(cm.exception) for s in self.fabric.servers), "message names no server")
        with self.assertRaises(smb.NotFound):
            self.client.info(name)
        with self.assertRaises(smb.NotFound):
            self.client.destroy(name)

    def test_already_exists(self):
        name = self.unique_name()
        self.client.create(name, 4096)
        with self.assertRaises(smb.AlreadyExists) as cm:
            self.new_client().create(name, 4096)
        self.check(cm.exception, smb.AlreadyExists, "already_exists", name)
        # open_or_create is the race-free way: it opens.
        self.assertEqual(self.client.open_or_create(name, 4096).size, 4096)

    def test_invalid_argument(self):
        cases = [
            (lambda: self.client.create("", 4096), "buffer name ''"),
            (lambda: self.client.create("has space", 4096), "has space"),
            (lambda: self.client.create("x" * 300, 4096), "200 characters"),
            (lambda: self.client.create(self.unique_name("zero"), 0), "size must be greater than zero"),
            (lambda: self.client.create(self.unique_name("stripe"), 4096, stripe_unit=12), "stripe unit 12"),
            (lambda: self.client.create(self.unique_name("op"), 4096).apply("fma", "f32", count=1),
             "unknown vector op 'fma'"),
            (lambda: self.client.create(self.unique_name("dt"), 4096).apply("scale", "f128", count=1),
             "'f128' has no smb equivalent"),
            (lambda: smb.dtype_name("complex64"), "complex64"),
            (lambda: smb.Client(servers=self.fabric.server_list, timeout=-1), "timeout"),
            (lambda: smb.Client(servers=self.fabric.server_list, transport="carrier-pigeon"), "'carrier-pigeon'"),
            (lambda: smb.Client(servers=self.fabric.server_list, transport_options={"colour": "blue"}),
             "no option 'colour'"),
            (lambda: smb.Client(servers=self.fabric.server_list, transport_options={"protocol": "sideways"}),
             "auto, rma or am"),
            (lambda: smb.UpdateEngine(self.client, self.unique_name("eng"), 4, mode="adam"), "unknown update mode"),
        ]
        for call, words in cases:
            with self.subTest(words=words):
                with self.assertRaises(smb.InvalidArgument) as cm:
                    call()
                self.check(cm.exception, smb.InvalidArgument, "invalid_argument", words)
                self.assertIsInstance(cm.exception, ValueError)

    def test_transport_options_reach_the_transport(self):
        self.assertIn("ucx", smb.TRANSPORTS)
        self.assertRegex(smb.__version__, r"^\d+\.\d+\.\d+$")
        client = smb.Client(servers=self.fabric.server_list, transport_options={"protocol": "am"})
        self.assertTrue(all("data protocol am" in p for p in client.describe_paths()), client.describe_paths())

    def test_capacity_exhausted(self):
        name = self.unique_name("huge")
        with self.assertRaises(smb.CapacityExhausted) as cm:
            self.client.create(name, 1 << 30)  # 512 MiB a server; they lend 64 MiB
        self.check(cm.exception, smb.CapacityExhausted, "no_space", name)
        self.assertIsInstance(cm.exception, MemoryError)
        self.assertTrue(any(s in str(cm.exception) for s in self.fabric.servers), "message names no server")
        with self.assertRaises(smb.NotFound):  # nothing left behind
            self.client.open(name)
        self.client.create(name, 4096)  # the name is free

    def test_out_of_range(self):
        b = self.client.create(self.unique_name(), 4096)
        with self.assertRaises(smb.OutOfRange) as cm:
            b.read(4096 - 4, bytearray(8))
        self.check(cm.exception, smb.OutOfRange, "out_of_range", b.name, "4096")
        self.assertIsInstance(cm.exception, IndexError)
        with self.assertRaises(smb.OutOfRange) as cm:
            b.read(5000)  # without `out`: an offset past the end
        self.check(cm.exception, smb.OutOfRange, "out_of_range", b.name)
        with self.assertRaises(smb.OutOfRange):
            b.write(4000, bytes(200))
        with self.assertRaises(smb.OutOfRange):
            b.read_async(4090, bytearray(8)).wait()

    def test_timeout(self):
        b = self.client.create(self.unique_name(), 4096)
        with self.assertRaises(smb.Timeout) as cm:
            b.wait_version(b.version() + 5, timeout=0.2)
        self.check(cm.exception, smb.Timeout, "timeout", b.name)
        self.assertIsInstance(cm.exception, TimeoutError)

    def test_unreachable(self):
        address = f"127.0.0.1:{free_loopback_port()}"
        start = time.monotonic()
        # One server down: the client starts, and what needs that server fails naming it.
        some = smb.Client(servers=[self.fabric.servers[0], address], timeout=3)
        with self.assertRaises(smb.Unreachable) as cm:
            some.create(self.unique_name(), 4096)
        self.check(cm.exception, smb.Unreachable, "unreachable", address)
        self.assertIsInstance(cm.exception, ConnectionError)
        # None reachable: the client does not start.
        with self.assertRaises(smb.Unreachable) as cm:
            smb.Client(servers=[address], timeout=3)
        self.check(cm.exception, smb.Unreachable, "unreachable", address)
        self.assertLess(time.monotonic() - start, 10)

    def test_codes_match_the_library(self):
        # Every Errc but ok has its class; the class's code is the Errc name.
        names = smb._core.code_names()
        self.assertEqual(names[0], "ok")
        classes = {cls.code: cls for cls in (smb.InvalidArgument, smb.OutOfRange, smb.NotFound, smb.AlreadyExists,
                                             smb.CapacityExhausted, smb.Unreachable, smb.ServerGone, smb.Timeout,
                                             smb.ProtocolError, smb.TransportError, smb.InternalError,
                                             smb.DataLost, smb.PermissionDenied, smb.Busy, smb.OutOfOrder)}
        self.assertEqual(sorted(classes), sorted(names[1:]))
        for code, cls in classes.items():
            error = smb.errors.from_code(code, f"a {code} message")
            self.assertIs(type(error), cls)
            self.assertEqual(error.code, code)
            self.assertEqual(str(error), f"a {code} message")
            # Survives pickling (errors cross process boundaries in launchers).
            again = pickle.loads(pickle.dumps(error))
            self.assertIs(type(again), cls)
            self.assertEqual(again.code, code)
        self.assertIs(type(smb.errors.from_code("something_new", "m")), smb.Error)

    def test_builtin_bases(self):
        self.assertTrue(issubclass(smb.NotFound, LookupError))
        self.assertTrue(issubclass(smb.Timeout, TimeoutError))
        self.assertTrue(issubclass(smb.InvalidArgument, ValueError))
        self.assertTrue(issubclass(smb.OutOfRange, IndexError))
        self.assertTrue(issubclass(smb.CapacityExhausted, MemoryError))
        self.assertTrue(issubclass(smb.Unreachable, ConnectionError))
        self.assertTrue(issubclass(smb.ServerGone, ConnectionError))
        self.assertTrue(issubclass(smb.PermissionDenied, PermissionError))
        for cls in (smb.NotFound, smb.Timeout, smb.InvalidArgument, smb.AlreadyExists, smb.ProtocolError):
            self.assertTrue(issubclass(cls, smb.Error))
            self.assertTrue(issubclass(cls, Exception))


class PermissionDeniedTest(unittest.TestCase):
    """A server run with --auth-token-file: the secret opens it, its absence or another does not."""

    def test_secret(self):
        with tempfile.TemporaryDirectory() as d:
            right, wrong = os.path.join(d, "right"), os.path.join(d, "wrong")
            for path, text in ((right, "s3cret"), (wrong, "s3cret!")):
                with open(path, "w") as f:
                    f.write(text)
                os.chmod(path, 0o600)
            servers = fabric.Fabric(1, "64M", extra_args=["--auth-token-file", right])
            self.addCleanup(servers.stop)
            servers.start()
            client = smb.Client(servers=servers.server_list, timeout=5, auth_token_file=right)
            client.create("guarded", 4096)
            del client
            for secret in (None, wrong):
                with self.assertRaises(smb.PermissionDenied) as cm:
                    smb.Client(servers=servers.server_list, timeout=5, auth_token_file=secret)
                self.assertEqual(cm.exception.code, "permission_denied")
                self.assertIn(servers.servers[0], str(cm.exception))


class ServerGoneTest(fabric.FabricTestCase):
    """Its own fabric per test: a server is killed."""


    @classmethod
    def setUpClass(cls):
        pass  # no class-wide fabric

    def setUp(self):
        self.fabric = fabric.Fabric(3, "64M")
        self.addCleanup(self.fabric.stop)  # runs after the client below is dropped
        self.fabric.start()
        super().setUp()

    @needs_numpy
    def test_sigkill_one_of_three_servers(self):
        client = self.new_client(timeout=3)
        b = client.create(self.unique_name(), 3 * 4096 * 2, stripe_unit=4096)
        data = np.arange(b.size // 8, dtype=np.int64)
        b.write(0, data)
        victim = 1
        address = self.fabric.servers[victim]
        self.assertIn(address, b.layout.servers)
        self.fabric.kill(victim)
        start = time.monotonic()
        with self.assertRaises(smb.ServerGone) as cm:
            b.read(0, np.empty_like(data))
        self.assertLess(time.monotonic() - start, 8, "ServerGone took too long")
        error = cm.exception
        self.assertIs(type(error), smb.ServerGone)
        self.assertEqual(error.code, "server_gone")
        self.assertIsInstance(error, ConnectionError)
        self.assertIn(address, str(error))
        self.assertIn(b.name, str(error))
        # Writes over it fail too, promptly; the stripes on the other
        # servers still read.
        start = time.monotonic()
        with self.assertRaises(smb.Error):
            b.write(0, data)
        self.assertLess(time.monotonic() - start, 8)
        index = b.layout.servers.index(address)
        alive = (index + 1) % 3
        got = b.read(alive * 4096, size=4096)
        self.assertEqual(bytes(got), data.tobytes()[alive * 4096:(alive + 1) * 4096])


if __name__ == "__main__":
    fabric.main()
