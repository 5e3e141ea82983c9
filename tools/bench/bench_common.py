"""What every benchmark script here shares: where the tree is, the
interpreter with torch and NumPy, sizes on the command line, and writing a
measured table into its marked section of docs/benchmarks.md."""

import argparse
import os
import re
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON = "/usr/bin/python3"  # Debian's, with python3-torch and python3-numpy (not the first on PATH)
BENCHMARKS_MD = os.path.join(ROOT, "docs", "benchmarks.md")


def parse_size(text):
    """A byte count such as 4096, 64K, 1M or 2G (argparse type)."""
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"a size such as 64M: {text}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def replace_section(path, begin, end, text, heading=None):
    """Puts `text` (which starts with `begin` and ends with `end`) in place of
    that section of the file, or at its end (under `heading`, where given)."""
    with open(path) as f:
        doc = f.read()
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin)] + text + doc[doc.index(end) + len(end):]
    else:
        doc = doc.rstrip() + "\n\n" + (f"{heading}\n\n" if heading else "") + text + "\n"
    with open(path, "w") as f:
        f.write(doc)


def seconds_per_call(call, iters):
    """The mean wall time of `iters` calls of call(), back to back."""
    begin = time.perf_counter()
    for _ in range(iters):
        call()
    return (time.perf_counter() - begin) / iters
