#!/usr/bin/env bash
# Hybrid training across hosts (tools/testbed/testbed.sh): 2 worker hosts x 2
# workers train the torch example (plugins/torch/examples/train_digits.py,
# smb.torch's sync mode, one group per host) against 2 memory-server hosts,
# behind 1 Gbit/s links, launched by Open MPI through the testbed's agent.
# Each worker host runs an smbd on its own loopback for its group
# (SMB_GROUP_SERVERS). Checks: the job converges (test accuracy >= 0.95),
# the global weights' servers served both worker hosts over the links, and
# each group server served its own host's two workers.
#
# Usage: training_test.sh BUILD_DIR   (exit 77: skipped: no testbed, no mpirun or no torch here)
set -u -o pipefail

BUILD=${1:?training_test.sh BUILD_DIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TB=$ROOT/tools/testbed/testbed.sh
NAME=smbtt$$
LOGS=$(mktemp -d /tmp/smb-testbed-training.XXXXXX)
SMBD=$BUILD/smb-server/smbd
PYTHON=/usr/bin/python3
EXAMPLE=$ROOT/plugins/torch/examples/train_digits.py
GROUP_SERVER=127.0.0.1:7100

command -v mpirun >/dev/null || { echo "training_test: SKIP: no mpirun (apt-get install openmpi-bin)"; exit 77; }
"$PYTHON" -c 'import torch, sklearn' 2>/dev/null ||
  { echo "training_test: SKIP: $PYTHON has no torch or scikit-learn (python3-torch, python3-sklearn)"; exit 77; }
[[ -d $BUILD/python/smb ]] || { echo "training_test: SKIP: the smb Python package was not built"; exit 77; }

tb() { "$TB" --name "$NAME" "$@"; }
cleanup() { tb down >/dev/null 2>&1; }
trap cleanup EXIT
FAILED=0
fail() { echo "training_test: FAIL: $*"; FAILED=1; }

tb up --hosts 4 --link 1gbit
rc=$?
((rc == 77)) && exit 77
((rc == 0)) || { echo "training_test: testbed up failed"; exit 1; }

start_smbd() {  # HOST LISTEN LOG
  "$TB" --name "$NAME" exec "$1" "$SMBD" --listen "$2" --capacity 128M >"$3" 2>&1 &
  for _ in $(seq 100); do
    grep -q 'smbd ready' "$3" && return 0
    sleep 0.1
  done
  fail "smbd on $1 did not start: $(tail -3 "$3")"
  return 1
}
for h in h3 h4; do start_smbd "$h" "$(tb addr "$h"):7000" "$LOGS/smbd-$h.log" || exit 1; done
for h in h1 h2; do start_smbd "$h" "$GROUP_SERVER" "$LOGS/group-$h.log" || exit 1; done
SERVERS=$(tb addr h3):7000,$(tb addr h4):7000

echo "== 2 hosts x 2 workers, sync mode, groups on their own hosts' servers"
SMB_TESTBED_NAME=$NAME timeout -k 10 300 "$TB" --name "$NAME" exec h1 mpirun --allow-run-as-root \
  --host h1:2,h2:2 -np 4 --mca plm_rsh_agent "$ROOT/tools/testbed/mpi-agent.sh" --mca routed direct \
  --mca oob_tcp_if_include eth0 --mca btl_tcp_if_include eth0 --mca btl tcp,self \
  -x SMB_SERVERS="$SERVERS" -x SMB_GROUP_SERVERS="$GROUP_SERVER" -x SMB_JOB_ID="$NAME" \
  -x PYTHONPATH="$BUILD/python" -x OMP_NUM_THREADS=1 \
  "$PYTHON" "$EXAMPLE" --mode sync --tau 2 --epochs 12 --json >"$LOGS/train.log" 2>&1 ||
  fail "training failed: $(tail -15 "$LOGS/train.log")"
grep '^{' "$LOGS/train.log" | sed 's/^/  | /' | tail -4
accuracy=$(grep '^{' "$LOGS/train.log" | tail -1 | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["accuracy"])' 2>/dev/null)
echo "  final test accuracy: ${accuracy:-none}"
"$PYTHON" -c "import sys; sys.exit(0 if float('${accuracy:-0}') >= 0.95 else 1)" ||
  fail "the job did not converge: accuracy ${accuracy:-none} (one worker alone reaches 0.98)"

# Who served whom: smbd logs each client session that leaves.
for h in h3 h4; do
  for w in h1 h2; do
    grep -q "client $(tb addr "$w"):" "$LOGS/smbd-$h.log" ||
      fail "the fabric's server on $h never served worker host $w over the links"
  done
done
for h in h1 h2; do
  n=$(grep -c 'client 127.0.0.1:.*left' "$LOGS/group-$h.log")
  ((n >= 2)) || fail "the group server on $h served $n of its host's 2 workers"
done

if ((FAILED)); then
  echo "training_test: FAILED (logs in $LOGS)"
  exit 1
fi
rm -rf "$LOGS"
echo "training_test: passed"
