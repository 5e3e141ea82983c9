#!/bin/bash
# deploy/slurm/smb-train.sbatch, run as Slurm would run it on a 2-node
# allocation, with srun and scontrol replaced by stand-ins that run each
# task here (slurm-stubs/; no Slurm cluster is available): the first node
# runs a real smbd, two workers on the second write and verify a buffer
# through it with smb-bench, the job's status is the workers', and the
# server is stopped at the end. Also: a failing worker fails the job, and
# an allocation too small for servers and workers is refused.
# $1: smbd, $2: smbctl, $3: smb-bench, $4: the source tree.
set -euo pipefail
smbd=$1 smbctl=$2 bench=$3 src=$4
script=$src/deploy/slurm/smb-train.sbatch
here=$(cd "$(dirname "$0")" && pwd)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export PATH=$here/slurm-stubs:$PATH SMBD=$smbd SMBCTL=$smbctl SMB_PORT=$port SMB_CAPACITY=64M
export SMB_SERVER_NODES=1 SMB_WORKERS_PER_NODE=2 SMB_READY_TIMEOUT=30 SLURM_JOB_NODELIST=127.0.0.1,127.0.0.2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fail() { echo "FAILED: $*"; cat "$log"; exit 1; }
shellcheck "$script" >"$log" 2>&1 || fail "shellcheck finds fault with $script"

# shellcheck disable=SC2016  # expanded by each worker
bash "$script" bash -c '"$0" --op write --size 1M --verify --name "slurm-$SLURM_PROCID" --json' "$bench" >"$log" 2>&1 ||
  fail "the job failed"
grep -q "every server is ready: SMB_SERVERS=127.0.0.1:$port" "$log" || fail "no ready line naming the server"
[[ $(grep -c '"verified":true' "$log") == 2 ]] || fail "two workers should each have verified a buffer"
if "$smbctl" --servers "127.0.0.1:$port" status >/dev/null 2>&1; then fail "smbd still serves after the job"; fi

status=0
bash "$script" bash -c 'exit 3' >"$log" 2>&1 || status=$?
[[ $status == 3 ]] || fail "a worker's status 3 should be the job's, got $status"

status=0
SLURM_JOB_NODELIST=127.0.0.1 bash "$script" true >"$log" 2>&1 || status=$?
[[ $status != 0 ]] && grep -q "leaves none for workers" "$log" || fail "a 1-node allocation should be refused"
echo "deploy/slurm: smbd started, 2 workers verified their buffers, statuses passed on, servers stopped"
