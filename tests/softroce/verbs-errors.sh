#!/usr/bin/env bash
# Shows the native verbs transport's set-up error messages (memlock too low,
# wrong transport, an address no RDMA device serves, port down, unknown
# device). Not a pass/fail test: read the output.
#   tests/softroce/run-in-vm.sh tests/softroce/verbs-errors.sh [BUILD_DIR]
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
B=${1:-$ROOT/build/verbs}
T=$(mktemp -d); chmod 0777 "$T"
export SMB_TRANSPORT=verbs
addr() { for _ in $(seq 50); do grep -o 'ready on [^ ]*' "$1" | cut -d' ' -f3 | grep . && return; sleep 0.2; done; }
bench() { timeout 60 "$B/tools/smb-bench" --op write --size 8M --block 1M "$@" 2>&1 | tail -2; }

# root ignores the memlock limit (CAP_IPC_LOCK): run those as nobody.
nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all "$@"; }
chmod 0666 /dev/infiniband/* 2>/dev/null
echo "## smbd with ulimit -l 1024 (KiB), as nobody"
(ulimit -l 1024; exec setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all "$B/smb-server/smbd" --transport verbs --listen 10.0.2.15:0 --capacity 64M >"$T/s1.log" 2>&1) &
A=$(addr "$T/s1.log"); bench --servers "$A"; tail -2 "$T/s1.log"
echo "## smb-bench with ulimit -l 1024 (KiB), as nobody"
"$B/smb-server/smbd" --transport verbs --listen 10.0.2.15:0 --capacity 64M >"$T/s2.log" 2>&1 &
A=$(addr "$T/s2.log"); (ulimit -l 1024; nobody timeout 60 "$B/tools/smb-bench" --op write --size 8M --block 1M --servers "$A" 2>&1 | tail -2)
echo "## smbd over ucx, client asks for verbs"
"$B/smb-server/smbd" --listen 10.0.2.15:0 --capacity 16M >"$T/s3.log" 2>&1 &
A=$(addr "$T/s3.log"); bench --servers "$A"
echo "## smbd on 127.0.0.1 (no RDMA device on lo)"
"$B/smb-server/smbd" --transport verbs --listen 127.0.0.1:0 --capacity 16M >"$T/s4.log" 2>&1 &
A=$(addr "$T/s4.log"); bench --servers "$A"
echo "## unknown device"
SMB_RDMA_DEVICE=mlx5_9 timeout 20 "$B/smb-server/smbd" --transport verbs --capacity 16M 2>&1 | tail -2
echo "## port down"
ip link set eth0 down; sleep 1
timeout 20 "$B/smb-server/smbd" --transport verbs --listen 10.0.2.15:0 --capacity 16M 2>&1 | tail -2
kill $(jobs -p) 2>/dev/null
exit 0
