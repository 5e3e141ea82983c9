#!/usr/bin/env bash
# The fabric across hosts (tools/testbed/testbed.sh): 3 memory-server hosts
# and 2 client hosts, network namespaces on one machine behind 1 Gbit/s
# shaped links. A striped buffer is written from one client host and read
# back and verified from the other, over TCP, also in reads whose replies
# outrun the links; a server host's smbd killed in
# the middle of a transfer makes the clients fail with "server gone" within
# seconds (not at their timeout), and the surviving hosts keep serving.
#
# Usage: cluster_test.sh BUILD_DIR   (exit 77: skipped, the testbed cannot run here)
set -u -o pipefail

BUILD=${1:?cluster_test.sh BUILD_DIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TB=$ROOT/tools/testbed/testbed.sh
NAME=smbtb$$
LOGS=$(mktemp -d /tmp/smb-testbed.XXXXXX)
SMBD=$BUILD/smb-server/smbd
BENCH=$BUILD/tools/smb-bench
FAILED=0

tb() { "$TB" --name "$NAME" "$@"; }
cleanup() { tb down >/dev/null 2>&1; }
trap cleanup EXIT
fail() { echo "cluster_test: FAIL: $*"; FAILED=1; }

tb up --hosts 5 --link 1gbit
rc=$?
((rc == 77)) && exit 77
((rc == 0)) || { echo "cluster_test: testbed up failed"; exit 1; }

declare -A SMBD_PID
start_smbd() {  # HOST
  local h=$1 addr
  addr=$(tb addr "$h")
  # Not through tb(): a function in the background is a subshell, and $! must
  # be smbd itself (testbed.sh execs all the way down to it).
  "$TB" --name "$NAME" exec "$h" "$SMBD" --listen "$addr:7000" --capacity 96M >"$LOGS/smbd-$h.log" 2>&1 &
  SMBD_PID[$h]=$!
  for _ in $(seq 100); do
    grep -q 'smbd ready' "$LOGS/smbd-$h.log" && return 0
    sleep 0.1
  done
  fail "smbd on $h did not start: $(tail -3 "$LOGS/smbd-$h.log")"
  return 1
}
bench() {  # HOST LOG ARGS...
  local h=$1 log=$2
  shift 2
  timeout -k 5 120 "$TB" --name "$NAME" exec "$h" "$BENCH" -v "$@" >"$log" 2>&1
}

for h in h1 h2 h3; do start_smbd "$h" || exit 1; done
SERVERS=$(tb addr h1):7000,$(tb addr h2):7000,$(tb addr h3):7000

echo "== a striped buffer over 3 server hosts: written from h4, read and verified from h5"
bench h4 "$LOGS/write.log" --servers "$SERVERS" --op write --size 24M --block 1M --stripe-unit 1M --verify --keep --name striped ||
  fail "write from h4: $(tail -5 "$LOGS/write.log")"
bench h5 "$LOGS/read.log" --servers "$SERVERS" --op read --size 24M --block 1M --verify --name striped ||
  fail "read from h5: $(tail -5 "$LOGS/read.log")"
sed 's/^/  | /' "$LOGS/write.log" "$LOGS/read.log"
for log in write read; do
  grep -q 'verify *ok' "$LOGS/$log.log" || fail "$log: no 'verify ok'"
  [[ $(grep -c '^ *path .*am: tcp' "$LOGS/$log.log") == 3 ]] ||
    fail "$log: expected 3 servers reached over TCP across the links (path lines above)"
done

echo "== replies bigger than a link carries at once: the whole buffer in one read, 10 times"
# Each read is 8 replies of 1 MiB in flight per server; they outrun the link,
# so the servers' sends complete later. A server that lost track of such
# sends (a UCX request freed while in flight loses its callback) counted them
# as never delivered and, past its bound, dropped the client's replies: the
# read hung.
bench h5 "$LOGS/whole.log" --servers "$SERVERS" --op read --size 24M --block 24M --iters 10 --verify --name striped ||
  fail "10 whole-buffer reads from h5: $(tail -5 "$LOGS/whole.log")"
grep -q 'verify *ok' "$LOGS/whole.log" || fail "whole-buffer reads: no 'verify ok'"
for h in h1 h2 h3; do
  ! grep -q 'does not take its replies' "$LOGS/smbd-$h.log" || fail "smbd on $h dropped replies: $(grep -m1 'replies' "$LOGS/smbd-$h.log")"
done
sed 's/^/  | /' "$LOGS/whole.log" | grep -E 'moved|verify'

echo "== smbd on h2 killed in the middle of a transfer"
# About 20 s of writes at the link's rate; smbd on h2 goes after 2.
bench h4 "$LOGS/killed.log" --servers "$SERVERS" --op write --size 24M --block 1M --stripe-unit 1M --iters 100 --name long &
client=$!
sleep 2
kill -9 "${SMBD_PID[h2]}"
killed_at=$(date +%s%N)
wait "${SMBD_PID[h2]}" 2>/dev/null
wait "$client"
client_rc=$?
took_ms=$(( ($(date +%s%N) - killed_at) / 1000000 ))
sed 's/^/  | /' "$LOGS/killed.log" | tail -4
((client_rc != 0)) || fail "the client went on as if nothing happened"
grep -q -i 'gone' "$LOGS/killed.log" || fail "the client's error does not say the server is gone"
echo "  the client failed ${took_ms} ms after the kill (its timeout: 15 s)"
((took_ms < 10000)) || fail "the client took ${took_ms} ms to notice, not seconds"

echo "== the surviving hosts keep serving"
ALIVE=$(tb addr h1):7000,$(tb addr h3):7000
bench h5 "$LOGS/alive.log" --servers "$ALIVE" --op write --size 16M --block 1M --stripe-unit 1M --verify ||
  fail "after the kill, h1 and h3: $(tail -5 "$LOGS/alive.log")"
grep -q 'verify *ok' "$LOGS/alive.log" || fail "after the kill: no 'verify ok'"

if ((FAILED)); then
  echo "cluster_test: FAILED (logs in $LOGS)"
  exit 1
fi
rm -rf "$LOGS"
echo "cluster_test: passed"
