#!/usr/bin/python3
"""smb-caffe trains real Caffe on real data against real smbd:

- Caffe's own `caffe train` and `smb-caffe train --mode single` take the
  same, unchanged solver file and reach the same accuracy;
- 4 workers in 2 groups reach the one-worker test accuracy within 0.02 in
  each mode (seasgd, downpour, sync).
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "digits")
SMB_CAFFE = os.environ.get("SMB_CAFFE", "smb-caffe")
SMBRUN = os.environ.get("SMBRUN", "smbrun")
CAFFE = os.environ.get("CAFFE_BIN", "caffe")

try:
    import h5py  # noqa: F401
    import sklearn  # noqa: F401
    MISSING = None
except ImportError as e:  # pragma: no cover - reported as a skip
    MISSING = f"h5py or scikit-learn is missing ({e}); Debian: python3-h5py python3-sklearn"


def result(stdout):
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise AssertionError(f"no result printed:\n{stdout}")
    return lines[-1]


@unittest.skipIf(MISSING, MISSING)
class CaffeTrainingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="smb-caffe-")
        subprocess.run([sys.executable, os.path.join(EXAMPLE, "make_digits_hdf5.py"), cls.dir], check=True)
        cls.solver = os.path.join(cls.dir, "lenet_digits_solver.prototxt")
        done = subprocess.run([SMB_CAFFE, "train", "--solver", cls.solver, "--mode", "single", "--json"],
                              cwd=cls.dir, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        cls.single = result(done.stdout)["accuracy"]

    @classmethod
    def tearDownClass(cls):
        subprocess.run(["rm", "-rf", cls.dir])

    def test_stock_caffe_takes_the_same_solver(self):
        done = subprocess.run([CAFFE, "train", "--solver", self.solver], cwd=self.dir, capture_output=True,
                              text=True, timeout=300)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        accuracies = re.findall(r"Test net output #\d+: accuracy = ([0-9.]+)", done.stderr)
        self.assertTrue(accuracies, done.stderr[-2000:])
        self.assertAlmostEqual(float(accuracies[-1]), self.single, delta=0.02)
        self.assertGreater(self.single, 0.9, "one worker should learn the digits")

    def train(self, mode):
        done = subprocess.run([SMBRUN, "-np", "4", "--local-servers", "2", "--capacity", "128M", "--timeout", "500",
                               "--", SMB_CAFFE, "train", "--solver", self.solver, "--mode", mode, "--groups", "2",
                               "--json"], cwd=self.dir, capture_output=True, text=True, timeout=600)
        self.assertEqual(done.returncode, 0, f"{mode}: {done.stderr[-3000:]}")
        r = result(done.stdout)
        self.assertEqual(r["workers"], 4)
        self.assertGreaterEqual(r["accuracy"], self.single - 0.02,
                                f"{mode}: {r['accuracy']:.4f} against one worker's {self.single:.4f}")

    def test_seasgd(self):
        self.train("seasgd")

    def test_downpour(self):
        self.train("downpour")

    def test_sync(self):
        self.train("sync")


if __name__ == "__main__":
    unittest.main(verbosity=2)
