#!/usr/bin/env bash
# Two testbed sites joined by a slow, distant line (testbed.sh up --sites 2,
# tools/testbed/delay_link.cpp): 3 hosts, h1 and h2 in one site, h3 in the
# other, a 40 ms round trip between the sites. A TCP connect inside a site
# takes well under the round trip and one across it at least the round
# trip; a buffer striped over a server in each site is written from one
# site and read back and verified from the other.
#
# Usage: sites_test.sh BUILD_DIR   (exit 77: skipped, the testbed cannot run here)
set -u -o pipefail

BUILD=${1:?sites_test.sh BUILD_DIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TB=$ROOT/tools/testbed/testbed.sh
NAME=smbsite$$
LOGS=$(mktemp -d /tmp/smb-testbed.XXXXXX)
FAILED=0

tb() { "$TB" --name "$NAME" "$@"; }
cleanup() { tb down >/dev/null 2>&1; }
trap cleanup EXIT
fail() { echo "sites_test: FAIL: $*"; FAILED=1; }
command -v c++ >/dev/null || { echo "sites_test: no c++ to build the line between sites"; exit 77; }

tb up --hosts 3 --sites 2 --between 100mbit --rtt 40
rc=$?
((rc == 77)) && exit 77
((rc == 0)) || { echo "sites_test: testbed up failed"; exit 1; }

# Milliseconds of the fastest of 5 TCP connects from HOST to ADDR (port 9:
# nothing listens, the refusal comes back after one round trip).
connect_ms() {
  tb exec "$1" /usr/bin/python3 -c '
import socket, sys, time
best = 1e9
for _ in range(5):
    started = time.perf_counter()
    try:
        socket.create_connection((sys.argv[1], 9), timeout=5).close()
    except OSError:
        pass
    best = min(best, time.perf_counter() - started)
print(int(best * 1000))' "$2"
}

inside=$(connect_ms h1 "$(tb addr h2)")
across=$(connect_ms h1 "$(tb addr h3)")
echo "connect inside a site: ${inside} ms, across the line: ${across} ms"
((inside < 20)) || fail "a connect inside a site took ${inside} ms"
((across >= 40 && across < 400)) || fail "a connect across the 40 ms line took ${across} ms"

for h in h2 h3; do
  "$TB" --name "$NAME" exec "$h" "$BUILD/smb-server/smbd" --listen "$(tb addr "$h"):7000" --capacity 64M \
    >"$LOGS/smbd-$h.log" 2>&1 &
done
for h in h2 h3; do
  for _ in $(seq 100); do grep -q 'smbd ready' "$LOGS/smbd-$h.log" && break; sleep 0.1; done
  grep -q 'smbd ready' "$LOGS/smbd-$h.log" || fail "smbd on $h did not start: $(tail -3 "$LOGS/smbd-$h.log")"
done
SERVERS=$(tb addr h2):7000,$(tb addr h3):7000
timeout -k 5 120 "$TB" --name "$NAME" exec h1 "$BUILD/tools/smb-bench" --servers "$SERVERS" --op write --size 8M \
  --block 1M --stripe-unit 1M --verify --keep --name across >"$LOGS/write.log" 2>&1 ||
  fail "write from h1: $(tail -5 "$LOGS/write.log")"
timeout -k 5 120 "$TB" --name "$NAME" exec h3 "$BUILD/tools/smb-bench" --servers "$SERVERS" --op read --size 8M \
  --block 1M --verify --name across >"$LOGS/read.log" 2>&1 ||
  fail "read from h3: $(tail -5 "$LOGS/read.log")"

((FAILED)) && { echo "sites_test: logs in $LOGS"; exit 1; }
rm -rf "$LOGS"
echo "sites_test: OK"
