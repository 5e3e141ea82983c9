#!/usr/bin/python3
"""Writes scikit-learn's bundled digits as Caffe HDF5 data into a directory:
train.h5 (1437 images) and test.h5 (360), the train.txt / test.txt lists
that HDF5Data layers read, and copies of the net and solver prototxts, so
that `smb-caffe train --solver DIR/lenet_digits_solver.prototxt` runs from DIR.

    make_digits_hdf5.py DIR [--seed 0]
"""

import argparse
import os
import shutil

import h5py
import numpy as np
from sklearn.datasets import load_digits

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    digits = load_digits()
    order = np.random.default_rng(args.seed).permutation(len(digits.target))
    x = (digits.images[order] / 16.0).astype(np.float32)[:, None, :, :]  # N x 1 x 8 x 8
    y = digits.target[order].astype(np.float32)
    for name, rows in (("test", slice(0, 360)), ("train", slice(360, None))):
        path = os.path.join(os.path.abspath(args.dir), f"{name}.h5")
        with h5py.File(path, "w") as f:
            f["data"] = x[rows]
            f["label"] = y[rows]
        with open(os.path.join(args.dir, f"{name}.txt"), "w") as f:
            f.write(path + "\n")
    for prototxt in ("lenet_digits.prototxt", "lenet_digits_solver.prototxt"):
        shutil.copy(os.path.join(HERE, prototxt), args.dir)


if __name__ == "__main__":
    main()
