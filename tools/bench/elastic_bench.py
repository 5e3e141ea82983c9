#!/usr/bin/python3
"""Elastic training on the fabric against TorchElastic's way (issue 35).

    tools/bench/elastic_bench.py --build build/ci [--steps 24]

Both run tools/bench/elastic_worker.py (resnet18, random data, 2 workers,
state committed every step):

  smb    hvd.elastic under `smbrun --min-np 1 --max-np 2`, 2 local smbd:
         the state in the fabric (2 copies)
  file   TorchElastic's recovery, done by this script as its agent does
         (torch.distributed.run itself fails on this Python 3.11): DDP over
         gloo, torch.save of the same state every step; when a worker dies
         every worker is stopped and all restart, loading the file

Measured, each in the same script, on the same machine:
  1. recovery: seconds from the SIGKILL of rank 1 to the survivors' next
     step and next commit, and to a replacement's first step;
  2. commit cost: a commit's time against a step's (commit every step);
  3. resume without a checkpoint file: a whole-job relaunch to its first
     step (smbrun --resume against servers that outlived the job), against
     relaunching the gloo job that loads its checkpoint file.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "elastic_worker.py")
PYTHON = "/usr/bin/python3"


class Events:
    """JSON events of every process started, as they come."""

    def __init__(self):
        self.items = []
        self.lock = threading.Lock()

    def follow(self, stream):
        def read():
            for line in stream:
                # Workers share smbrun's stdout: a line may hold two events.
                for part in line.replace("}{", "}\n{").splitlines():
                    if part.startswith("{"):
                        try:
                            event = json.loads(part)
                        except ValueError:
                            continue
                        with self.lock:
                            self.items.append(event)
        threading.Thread(target=read, daemon=True).start()

    def where(self, **match):
        with self.lock:
            return [e for e in self.items if all(e.get(k) == v for k, v in match.items())]

    def wait(self, predicate, timeout=600):
        deadline = time.time() + timeout
        while time.time() < deadline:
            with self.lock:
                found = [e for e in self.items if predicate(e)]
            if found:
                return found[0]
            time.sleep(0.01)
        raise SystemExit(f"timed out waiting for an event; last: {self.items[-5:]}")


def worker_cmd(mode, args, checkpoint=None):
    cmd = [PYTHON, WORKER, "--mode", mode, "--steps", str(args.steps)]
    return cmd + (["--checkpoint", checkpoint] if checkpoint else [])


def smb_env(args):
    return dict(os.environ, PYTHONPATH=os.path.join(args.build, "python"), OMP_NUM_THREADS="1",
                SMB_SMBD=os.path.join(args.build, "smb-server", "smbd"))


def smbrun(args, extra, events):
    cmd = [os.path.join(args.build, "tools", "smbrun", "smbrun"), "--timeout", "900"] + extra + ["--"] + \
        worker_cmd("smb", args)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=smb_env(args), start_new_session=True)
    events.follow(proc.stdout)
    return proc


def recovery_smb(args):
    events = Events()
    proc = smbrun(args, ["-np", "2", "--min-np", "1", "--max-np", "2", "--local-servers", "2", "--capacity", "1G"],
                  events)
    victim = events.wait(lambda e: e["event"] == "step" and e["rank"] == 1 and e["step"] >= args.kill_at)
    survivor = events.wait(lambda e: e["event"] == "step" and e["rank"] == 0)["pid"]
    killed = time.time()
    os.kill(victim["pid"], signal.SIGKILL)
    step = events.wait(lambda e: e["event"] == "step" and e["pid"] == survivor and e["t"] > killed)
    commit = events.wait(lambda e: e["event"] == "commit" and e["pid"] == survivor and e["t"] > step["t"])
    old = {victim["pid"], survivor}
    newcomer = events.wait(lambda e: e["event"] == "step" and e["pid"] not in old)
    proc.wait()
    return events, {"step": step["t"] - killed, "commit": commit["t"] - killed, "replacement": newcomer["t"] - killed,
                    "restore": [e["dt"] for e in events.where(event="restored", pid=survivor)]}


def start_file_job(args, checkpoint, events, port):
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1")
        p = subprocess.Popen(worker_cmd("file", args, checkpoint), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, env=env, start_new_session=True)
        events.follow(p.stdout)
        procs.append(p)
    return procs


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def recovery_file(args, checkpoint):
    """The agent's loop: a worker dies, every worker stops, all restart."""
    if os.path.exists(checkpoint):
        os.remove(checkpoint)
    events = Events()
    procs = start_file_job(args, checkpoint, events, free_port())
    victim = events.wait(lambda e: e["event"] == "step" and e["rank"] == 1 and e["step"] >= args.kill_at)
    killed = time.time()
    os.kill(victim["pid"], signal.SIGKILL)
    while all(p.poll() is None for p in procs):  # the agent notices (it polls; 10 ms here, 5 s by default)
        time.sleep(0.01)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        p.wait()
    old = {p.pid for p in procs}
    procs = start_file_job(args, checkpoint, events, free_port())
    step = events.wait(lambda e: e["event"] == "step" and e["pid"] not in old)
    commit = events.wait(lambda e: e["event"] == "commit" and e["pid"] not in old)
    for p in procs:
        p.wait()
    return events, {"step": step["t"] - killed, "commit": commit["t"] - killed, "replacement": step["t"] - killed,
                    "restore": [e["dt"] for e in events.where(event="restored") if e["pid"] not in old]}


def commit_cost(events, before):
    """Median commit time and median step time (between two steps of one
    worker, without the commit) among the steps before `before` (a time)."""
    steps = sorted((e for e in events.items if e["event"] == "step" and e["t"] < before and e.get("rank") == 0
                    and e["step"] > 2), key=lambda e: e["t"])
    commits = {e["step"]: e["dt"] for e in events.items if e["event"] == "commit" and e["t"] < before
               and e["pid"] == steps[0]["pid"]}
    intervals = [b["t"] - a["t"] - commits.get(a["step"], 0.0) for a, b in zip(steps, steps[1:])]
    spent = [commits[s["step"]] for s in steps if s["step"] in commits]
    return statistics.median(spent), statistics.median(intervals)


def resume_smb(args):
    """Every worker and smbrun die; a relaunch resumes from the servers."""
    smbd = os.path.join(args.build, "smb-server", "smbd")
    servers = []
    for _ in range(2):
        p = subprocess.Popen([smbd, "--listen", "127.0.0.1:0", "--capacity", "1G"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        servers.append((p, p.stdout.readline().split("ready on ")[1].strip()))
    try:
        listed = ",".join(a for _, a in servers)
        job = f"bench{os.getpid()}"
        events = Events()
        proc = smbrun(args, ["-np", "2", "--min-np", "2", "--servers", listed, "--job-id", job], events)
        events.wait(lambda e: e["event"] == "commit" and e["step"] >= args.kill_at)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        time.sleep(1.0)
        again = Events()
        launched = time.time()
        proc = smbrun(args, ["-np", "2", "--min-np", "2", "--servers", listed, "--resume", job], again)
        first = again.wait(lambda e: e["event"] == "step")
        proc.wait()
        return first["t"] - launched, [e["dt"] for e in again.where(event="restored")]
    finally:
        for p, _ in servers:
            p.kill()
            p.wait()


def resume_file(args, checkpoint):
    """The gloo job, killed whole after a checkpoint, relaunched over its file."""
    if os.path.exists(checkpoint):
        os.remove(checkpoint)
    events = Events()
    procs = start_file_job(args, checkpoint, events, free_port())
    events.wait(lambda e: e["event"] == "commit" and e["step"] >= args.kill_at)
    for p in procs:
        p.kill()
        p.wait()
    time.sleep(1.0)
    again = Events()
    launched = time.time()
    procs = start_file_job(args, checkpoint, again, free_port())
    first = again.wait(lambda e: e["event"] == "step")
    for p in procs:
        p.wait()
    return first["t"] - launched, [e["dt"] for e in again.where(event="restored")]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build/ci")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--kill-at", type=int, default=8)
    args = p.parse_args()
    args.build = os.path.abspath(args.build)
    checkpoint = os.path.join(tempfile.mkdtemp(prefix="elastic-bench-"), "state.pt")

    smb_events, smb = recovery_smb(args)
    smb_commit, smb_step = commit_cost(smb_events, smb_events.where(event="step")[-1]["t"])
    file_events, te = recovery_file(args, checkpoint)
    file_commit, file_step = commit_cost(file_events, file_events.where(event="step")[-1]["t"])
    smb_resume, smb_read = resume_smb(args)
    file_resume, file_read = resume_file(args, checkpoint)

    print("\n### Recovery: seconds from SIGKILL of rank 1 (2 workers, resnet18, commit every step)\n")
    print("| | smb elastic | TorchElastic's way (restart all, load file) | ratio |")
    print("|---|---:|---:|---:|")
    for key, what in (("step", "to the survivors' next step"), ("commit", "to their next commit"),
                      ("replacement", "to a replacement's first step")):
        print(f"| {what} | {smb[key]:.2f} | {te[key]:.2f} | {te[key] / smb[key]:.1f}x |")
    print(f"\nstate read at re-form: smb {statistics.median(smb['restore'] or [0]):.3f} s "
          f"(from the fabric), file {statistics.median(te['restore'] or [0]):.3f} s (torch.load)")
    print("\n### Commit cost (commit every step)\n")
    print("| | commit (s) | step without it (s) | fraction |")
    print("|---|---:|---:|---:|")
    print(f"| smb elastic (each of 2 writes half, 2 copies) | {smb_commit:.3f} | {smb_step:.3f} | "
          f"{smb_commit / smb_step:.1%} |")
    print(f"| torch.save to a file (rank 0) | {file_commit:.3f} | {file_step:.3f} | {file_commit / file_step:.1%} |")
    print("\n### Resume: a whole-job relaunch to its first step\n")
    print("| | seconds | of which reading the state |")
    print("|---|---:|---:|")
    print(f"| smbrun --resume (state in the servers) | {smb_resume:.2f} | {statistics.median(smb_read or [0]):.3f} |")
    print(f"| gloo job over its torch.save file | {file_resume:.2f} | {statistics.median(file_read or [0]):.3f} |")


if __name__ == "__main__":
    sys.exit(main())
