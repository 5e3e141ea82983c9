#!/usr/bin/env bash
# Benchmark (not a test), run inside the soft-RoCE VM:
#   tests/softroce/run-in-vm.sh tests/softroce/bench-verbs.sh [BUILD_DIR]
# smb-bench over the native verbs transport (and over UCX rc_verbs) against
# ib_write_bw / ib_read_bw (perftest) on the same rxe device, in one run, and
# prints a markdown table of the ratios. rxe under qemu TCG is software
# emulation: these are functional numbers, never RDMA speed.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${1:-$ROOT/build/ci}
DEV=rxe0 ADDR=10.0.2.15 SIZE=1048576 ITERS=${ITERS:-100}
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true' EXIT

# perftest pair on the device; prints the average MB/s (perftest: MB = 2^20 bytes).
perftest() {
  local tool=$1 port=$2
  "$tool" -d "$DEV" -x 1 -s "$SIZE" -n "$ITERS" -F -p "$port" >/tmp/$tool.server 2>&1 &
  PIDS+=($!)
  sleep 1
  "$tool" -d "$DEV" -x 1 -s "$SIZE" -n "$ITERS" -F -p "$port" "$ADDR" >/tmp/$tool.client 2>&1
  awk -v s="$SIZE" '$1 == s { print $4 }' /tmp/$tool.client | tail -n 1
}

# smbd with the given transport env; echoes its address.
start_smbd() {
  local log=/tmp/smbd-$1.log
  env "${@:2}" "$BUILD/smb-server/smbd" --transport "$1" --listen "$ADDR:0" --capacity 64M >"$log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do
    grep -q 'smbd ready on' "$log" && { sed -n 's/^smbd ready on //p' "$log"; return; }
    sleep 0.1
  done
  cat "$log" >&2
  return 1
}

# smb-bench MiB/s for one op (plus the flags in BENCH_FLAGS).
BENCH_FLAGS=()
bench() {
  local server=$1 op=$2
  shift 2
  env "$@" "$BUILD/tools/smb-bench" --servers "$server" --op "$op" --size 8M --block 1M \
    --iters "$((ITERS / 8 + 1))" --depth 8 --json "${BENCH_FLAGS[@]}" |
    python3 -c 'import json,sys; print(round(json.load(sys.stdin)["bandwidth_bytes_per_s"] / 2**20, 1))'
}

write_ref=$(perftest ib_write_bw 18515)
read_ref=$(perftest ib_read_bw 18516)
native=$(start_smbd verbs)
nw=$(bench "$native" write SMB_TRANSPORT=verbs)
nr=$(bench "$native" read SMB_TRANSPORT=verbs)
BENCH_FLAGS=(--register)  # the op memory registered: the NIC moves it in place, no staging copy
nzw=$(bench "$native" write SMB_TRANSPORT=verbs)
nzr=$(bench "$native" read SMB_TRANSPORT=verbs)
BENCH_FLAGS=()
ucx_env=(UCX_TLS=rc_verbs,ud_verbs,self UCX_NET_DEVICES=$DEV:1 UCX_UD_ETH_DGID_CHECK=n)
ucx=$(start_smbd ucx "${ucx_env[@]}")
uw=$(bench "$ucx" write "${ucx_env[@]}")
ur=$(bench "$ucx" read "${ucx_env[@]}")

python3 - "$write_ref" "$read_ref" "$nw" "$nr" "$nzw" "$nzr" "$uw" "$ur" <<'PY'
import sys
wr, rr, nw, nr, nzw, nzr, uw, ur = map(float, sys.argv[1:])
print("| op | perftest \"MB/sec\" (taken as MiB/s) | native verbs MiB/s | ratio | native verbs, registered memory MiB/s | ratio | UCX rc_verbs (am) MiB/s | ratio |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
print(f"| write (ib_write_bw) | {wr:.1f} | {nw:.1f} | {nw/wr:.2f} | {nzw:.1f} | {nzw/wr:.2f} | {uw:.1f} | {uw/wr:.2f} |")
print(f"| read (ib_read_bw) | {rr:.1f} | {nr:.1f} | {nr/rr:.2f} | {nzr:.1f} | {nzr/rr:.2f} | {ur:.1f} | {ur/rr:.2f} |")
PY
