#!/usr/bin/python3
"""What smbd keeps per client that has come and gone (issue 36, item 7).

For each kind of client, one fresh smbd: a warm-up round, then RSS is read,
then rounds of clients that each connect, do one op and leave, one after
another; RSS after each round. A client that stays after its round would
show as growth too, so each round ends only when smbd counts no client.

  bare     a control session only (hello, stat, close): no data channel
  ucx      a full libsmb client over UCX (shared memory and CMA here), all
           in this one process, which lives on
  ucx-exit the same, each client a process of its own that exits
           (smbctl status)
  tcp      a full libsmb client over smbd's own tcp transport
  ucx-tcp  a full libsmb client over UCX's TCP lanes (UCX_TLS=tcp,self)

Where only the UCX kinds grow, what smbd keeps is UCX's, below smbd's
session state (which every kind shares).

  /usr/bin/python3 tools/bench/departed_clients.py --build build/ci --clients 2000 --rounds 3
"""

import argparse
import json
import os
import re
import socket
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def map_count(pid):
    with open(f"/proc/{pid}/maps") as f:
        return sum(1 for _ in f)


def start_smbd(smbd, transport, env):
    proc = subprocess.Popen([smbd, "--listen", "127.0.0.1:0", "--capacity", "64M", "--transport", transport],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    line = proc.stdout.readline()
    addr = line.split("ready on ")[1].split()[0].rstrip(":,") if "ready on " in line else None
    if not addr:
        proc.kill()
        raise RuntimeError(f"smbd did not say it was ready: {line!r}")
    return proc, addr


def bare_session(addr):
    """hello, stat, close on a raw control connection (no data channel)."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        for request_id, (msg_type, body) in enumerate([(1, {"client": "departed-bench", "transport": "ucx",
                                                             "address": b""}), (9, {})], start=1):
            payload = msgpack(body)
            s.sendall(frame_header(msg_type, request_id, len(payload)) + payload)
            read_reply(s)


def exiting_client(addr, smbctl):
    subprocess.run([smbctl, "--servers", addr, "status"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def full_client(addr, smb, transport):
    c = smb.Client([addr], timeout=5.0, transport=transport)
    c.status()
    del c  # the last reference: the client closes its connections


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build", "ci"))
    p.add_argument("--clients", type=int, default=2000, help="clients per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--kinds", default="bare,ucx,ucx-exit,tcp,ucx-tcp")
    p.add_argument("--settle", type=float, default=12.0,
                   help="seconds after a round before RSS is read: smbd closes a departed client's endpoint "
                        "10 s after its session ended")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    build = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(build, "python"))
    import smb

    smbd = os.path.join(build, "smb-server", "smbd")
    results = []
    for kind in args.kinds.split(","):
        env = dict(os.environ)
        if kind == "ucx-tcp":
            env["UCX_TLS"] = "tcp,self"
            os.environ["UCX_TLS"] = "tcp,self"
        else:
            os.environ.pop("UCX_TLS", None)
        transport = "tcp" if kind == "tcp" else "ucx"
        proc, addr = start_smbd(smbd, transport, env)
        try:
            smbctl = os.path.join(build, "tools", "smbctl")
            one = ((lambda: bare_session(addr)) if kind == "bare" else
                   (lambda: exiting_client(addr, smbctl)) if kind == "ucx-exit" else
                   (lambda: full_client(addr, smb, transport)))
            for _ in range(200):  # warm-up: pools, first-use allocations
                one()
            time.sleep(args.settle)
            base = rss_kib(proc.pid)
            per_round = []
            for _ in range(args.rounds):
                start = time.monotonic()
                for _ in range(args.clients):
                    one()
                took = time.monotonic() - start
                time.sleep(args.settle)
                now = rss_kib(proc.pid)
                per_round.append({"rss_kib": now, "seconds": round(took, 1), "maps": map_count(proc.pid)})
            grown = (per_round[-1]["rss_kib"] - base) * 1024
            row = {"kind": kind, "clients": args.clients * args.rounds, "rss_base_kib": base,
                   "rounds": per_round, "bytes_per_client": round(grown / (args.clients * args.rounds), 1)}
            results.append(row)
            if not args.json:
                print(f"{kind:8} {row['clients']} clients: RSS {base} -> "
                      f"{' -> '.join(str(r['rss_kib']) for r in per_round)} KiB, "
                      f"{row['bytes_per_client']} B per departed client; memory maps "
                      f"{' -> '.join(str(r['maps']) for r in per_round)}", flush=True)
        finally:
            proc.terminate()
            proc.wait()
    if args.json:
        print(json.dumps(results, indent=2))


# ---- the control protocol by hand (protocol/messages.hpp): header, then a MessagePack map

MAGIC = 0x31424D53


def frame_header(msg_type, request_id, body_length):
    return struct.pack("<IHHII", MAGIC, wire_version(), msg_type, request_id, body_length)


def wire_version():
    with open(os.path.join(ROOT, "smb-common", "protocol", "message_schema.hpp")) as f:
        return int(re.search(r"kVersion = (\d+);", f.read()).group(1))


def read_reply(s):
    header = recv_all(s, 16)
    length = struct.unpack("<IHHII", header)[4]
    recv_all(s, length)


def recv_all(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("smbd closed the connection")
        out += chunk
    return out


def msgpack(value):
    """Just enough MessagePack for the hello and stat bodies."""
    if isinstance(value, dict):
        out = bytes([0x80 | len(value)])
        for k, v in value.items():
            out += msgpack(k) + msgpack(v)
        return out
    if isinstance(value, str):
        b = value.encode()
        return bytes([0xA0 | len(b)]) + b if len(b) < 32 else bytes([0xD9, len(b)]) + b
    if isinstance(value, bytes):
        return bytes([0xC4, len(value)]) + value
    raise TypeError(type(value))


if __name__ == "__main__":
    main()
