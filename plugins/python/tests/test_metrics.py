"""smbd --metrics: real traffic through the smb package, then /metrics scraped
over HTTP and read with prometheus_client's own parser (python3-prometheus-client):
the counters moved by exactly what the client did, the gauges show the pool
and the buffer, and a failed request is counted by its error.

Over UCX's TCP lane (UCX_TLS=tcp,self) so that writes and reads go through
smbd's CPU (active messages) and its transport counters see them; one-sided
RMA (shared memory, RDMA) is invisible to the server by design.
"""

import os
import socket
import time
import unittest
import urllib.request

os.environ["UCX_TLS"] = "tcp,self"  # before the smb package starts UCX, and for the smbd below

import fabric  # noqa: E402
import smb  # noqa: E402

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:  # pragma: no cover - Debian package python3-prometheus-client
    text_string_to_metric_families = None

np = fabric.optional_import("numpy")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@unittest.skipIf(text_string_to_metric_families is None,
                 "prometheus_client is missing (Debian package python3-prometheus-client)")
@unittest.skipIf(np is None, "numpy is missing (Debian package python3-numpy)")
class MetricsTest(unittest.TestCase):
    def setUp(self):
        self.port = free_port()
        self.fabric = fabric.Fabric(1, "64M", extra_args=["--metrics", f"127.0.0.1:{self.port}"])
        self.fabric.start()
        self.addCleanup(self.fabric.stop)
        self.client = smb.Client(servers=self.fabric.server_list, timeout=fabric.CLIENT_TIMEOUT)

    def scrape(self):
        """{(name, frozenset(labels)): value} of every sample."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as response:
            self.assertEqual(response.status, 200)
            text = response.read().decode()
        samples = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples[(s.name, frozenset(s.labels.items()))] = s.value
        return samples

    @staticmethod
    def value(samples, name, **labels):
        return samples.get((name, frozenset(labels.items())), 0.0)

    def eventually(self, check, what, limit=5.0):
        """The gauges are sampled once a second: wait for them."""
        deadline = time.monotonic() + limit
        while True:
            samples = self.scrape()
            if check(samples) or time.monotonic() > deadline:
                self.assertTrue(check(samples), what)
                return samples
            time.sleep(0.1)

    def test_counters_move_by_what_the_client_did(self):
        before = self.scrape()
        size, n, rounds = 1 << 20, 4096, 7
        buffer = self.client.create("metrics-b", size)
        payload = bytes(range(256)) * (size // 256)
        buffer.write(0, payload)
        self.assertEqual(bytes(buffer.read(0)), payload)
        ones = np.ones(n, dtype=np.float32)
        for _ in range(rounds):
            buffer.apply("accumulate", x=ones)
        buffer.apply("scale", dtype="f64", count=16, alpha=2.0)
        buffer.fetch_add(8 * n, 1)
        with self.assertRaises(smb.NotFound):
            self.client.open("metrics-no-such-buffer")
        after = self.scrape()

        def moved(name, **labels):
            return self.value(after, name, **labels) - self.value(before, name, **labels)

        self.assertEqual(moved("smb_vector_ops_total", op="accumulate", dtype="f32"), rounds)
        self.assertEqual(moved("smb_vector_op_bytes_total", op="accumulate", dtype="f32"), rounds * n * 4)
        self.assertEqual(moved("smb_vector_ops_total", op="scale", dtype="f64"), 1)
        self.assertEqual(moved("smb_vector_op_bytes_total", op="scale", dtype="f64"), 16 * 8)
        self.assertEqual(moved("smb_vector_ops_total", op="accumulate", dtype="f64"), 0)
        # Each vector op is one answered request (a data-path call), each timed.
        self.assertEqual(moved("smb_requests_total", message="vector_call"), rounds + 1)
        self.assertEqual(moved("smb_request_duration_seconds_count", message="vector_call"), rounds + 1)
        self.assertGreater(moved("smb_request_duration_seconds_sum", message="vector_call"), 0)
        self.assertGreaterEqual(moved("smb_requests_total", message="alloc_segment"), 1)
        self.assertGreaterEqual(moved("smb_request_errors_total", message="hold_layout", error="not_found"), 1)
        # The same totals reach clients in status() (smbctl top's rates).
        activity = self.client.status()[0].activity
        self.assertGreaterEqual(activity.vector_ops, rounds + 1)
        self.assertGreaterEqual(activity.vector_bytes, rounds * n * 4 + 16 * 8)
        self.assertGreaterEqual(activity.errors, 1)
        self.assertGreaterEqual(activity.requests, activity.vector_ops)
        waiting = self.client.status()[0].waiting  # nothing waits on it now
        self.assertEqual((waiting.versions, waiting.barrier_parties, waiting.locks), (0, 0, 0))
        # Over TCP the whole write and read went through smbd's transport
        # (its totals are sampled once a second).
        def transport_moved(s):
            return [self.value(s, "smb_transport_bytes_total", direction=d) -
                    self.value(before, "smb_transport_bytes_total", direction=d) for d in ("write", "read")]
        later = self.eventually(lambda s: min(transport_moved(s)) >= size, "transport bytes")
        self.assertGreaterEqual(self.value(later, "smb_transport_atomics_total") -
                                self.value(before, "smb_transport_atomics_total"), 1)

    def test_gauges_show_the_pool_and_each_buffer(self):
        self.client.create("metrics-g1", 3 << 20)
        samples = self.eventually(
            lambda s: self.value(s, "smb_buffer_bytes", buffer="metrics-g1") >= 3 << 20,
            "smb_buffer_bytes of metrics-g1")
        self.assertEqual(self.value(samples, "smb_capacity_bytes"), 64 << 20)
        self.assertGreaterEqual(self.value(samples, "smb_used_bytes"), 3 << 20)
        self.assertLessEqual(self.value(samples, "smb_largest_free_bytes"), (64 - 3) << 20)
        self.assertGreaterEqual(self.value(samples, "smb_clients"), 1)
        self.assertGreaterEqual(self.value(samples, "smb_buffers"), 1)
        self.client.destroy("metrics-g1")
        self.eventually(lambda s: ("smb_buffer_bytes", frozenset({("buffer", "metrics-g1")})) not in s,
                        "a destroyed buffer's series goes")

    def test_a_busy_port_is_a_clear_error(self):
        busy = fabric.Fabric(1, "64M", extra_args=["--metrics", f"127.0.0.1:{self.port}"])
        with self.assertRaises(fabric.FabricError) as caught:
            busy.start()
        self.assertIn("--metrics", str(caught.exception))


if __name__ == "__main__":
    fabric.main()
