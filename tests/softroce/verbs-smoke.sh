#!/usr/bin/env bash
# Extra checks of libsmb's native verbs transport, beyond suite.sh's
# smb-native-verbs case: repeated write/read/fetch-add, accumulate (atomics
# in a compare-and-swap loop), and a server killed while a client is busy
# (its ops must fail with server_gone, quickly, never hang).
#
# Usage (needs an RDMA device: run it in the VM):
#   tests/softroce/run-in-vm.sh tests/softroce/verbs-smoke.sh [BUILD_DIR] [REPEATS]
# BUILD_DIR defaults to build/verbs; REPEATS to 5.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${1:-$ROOT/build/verbs}
REPEATS=${2:-5}
SMBD=$BUILD/smb-server/smbd BENCH=$BUILD/tools/smb-bench
ADDR=${SMB_VERBS_ADDRESS:-10.0.2.15}
LOGS=$(mktemp -d)
export SMB_TRANSPORT=verbs
ulimit -l unlimited 2>/dev/null || true

PID=""
cleanup() { [[ -n $PID ]] && kill -KILL "$PID" 2>/dev/null; }
trap cleanup EXIT
start() {
  "$SMBD" --transport verbs --listen "$ADDR:0" --capacity 64M >"$LOGS/smbd.log" 2>&1 &
  PID=$!
  for _ in $(seq 100); do
    SERVER=$(grep -o 'ready on [^ ]*' "$LOGS/smbd.log" | awk '{ print $3 }') && [[ -n $SERVER ]] && return 0
    sleep 0.2
  done
  echo "smoke: smbd did not start:"; cat "$LOGS/smbd.log"; exit 1
}
run() {  # run LABEL ARGS...: smb-bench, must exit 0 with "verify ok"
  local label=$1; shift
  timeout -k 5 120 "$BENCH" --servers "$SERVER" "$@" >"$LOGS/b.log" 2>&1
  local rc=$?
  if ((rc != 0)) || ! grep -q 'verify *ok' "$LOGS/b.log"; then
    echo "smoke: FAIL $label (status $rc)"; sed 's/^/  | /' "$LOGS/b.log"; return 1
  fi
  echo "smoke: ok   $label: $(grep -m1 'moved' "$LOGS/b.log" | sed 's/^ *//')"
}

start
fails=0
for i in $(seq "$REPEATS"); do
  run "write #$i" --op write --size 8M --block 1M --verify --keep --name "s$i" || ((fails++))
  run "read #$i" --op read --size 8M --block 1M --verify --name "s$i" || ((fails++))
  run "fetch-add #$i" --op fetch-add --size 4K --iters 100 --threads 2 --verify || ((fails++))
done
run "accumulate" --op accumulate --size 64K --block 16K --threads 2 --verify || ((fails++))
run "write 2 threads depth" --op write --size 16M --block 256K --threads 2 --depth 8 --verify || ((fails++))

# Peer death: kill -9 smbd under a long-running write; the client must fail
# (not hang) and say the server is gone. A fresh smbd: the kept buffers fill the old one.
kill -KILL "$PID"; wait "$PID" 2>/dev/null
start
timeout -k 5 120 "$BENCH" --servers "$SERVER" --op write --size 8M --block 1M --iters 1000 >"$LOGS/death.log" 2>&1 &
bench=$!
sleep 3
kill -KILL "$PID"; wait "$PID" 2>/dev/null; PID=""
start_s=$(date +%s.%N)
wait "$bench"; rc=$?
took=$(echo "$(date +%s.%N) - $start_s" | bc)
echo "smoke: smb-bench after kill -9 smbd: status $rc after ${took}s:"
sed 's/^/  | /' "$LOGS/death.log" | tail -5
if ((rc == 0 || rc == 124 || rc == 137)); then echo "smoke: FAIL peer death"; ((fails++)); fi
grep -qi 'gone\|unresponsive' "$LOGS/death.log" || { echo "smoke: FAIL peer death: no 'gone' in the message"; ((fails++)); }
echo "smoke: $fails failure(s)"
((fails == 0))
