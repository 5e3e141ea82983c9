#!/usr/bin/env bash
# The figures in docs/reliability.md: two smbd on loopback, then
#   - N buffers (150-character names, one 4 KiB stripe per server) created,
#     listed with status and ls (paged), destroyed;
#   - C idle control connections held on one server;
#   - L disjoint range locks taken and released from one connection;
# and what each cost the daemons (RSS, open descriptors, CPU), sampled from
# /proc before, while held and after. Prints a markdown table.
#
#   tools/bench/reliability.sh [--buffers N] [--connections C] [--locks L] [--build DIR]
#   defaults: 100000 buffers, 10000 connections, 100000 locks, build/release
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUFFERS=100000 CONNECTIONS=10000 LOCKS=100000 BUILD=$ROOT/build/release
while (($# > 0)); do
  case "$1" in
    --buffers) BUFFERS=$2; shift ;;
    --connections) CONNECTIONS=$2; shift ;;
    --locks) LOCKS=$2; shift ;;
    --build) BUILD=$2; shift ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "reliability: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
SMBD=$BUILD/smb-server/smbd
BENCH=$BUILD/tools/smb-scale-bench
[[ -x $SMBD && -x $BENCH ]] || { echo "build first: cmake --preset release && cmake --build --preset release" >&2; exit 2; }
ulimit -n "$(ulimit -Hn)"

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

addresses=()
for i in 0 1; do
  "$SMBD" --listen 127.0.0.1:0 --capacity 1G --max-connections $((CONNECTIONS + 100)) --log-level warn \
    >"$work/out$i" 2>"$work/err$i" &
  pids+=($!)
  for _ in $(seq 100); do grep -q 'smbd ready on' "$work/out$i" && break; sleep 0.1; done
  addresses+=("$(sed -n 's/^smbd ready on //p' "$work/out$i")")
done
servers=$(IFS=,; echo "${addresses[*]}")
# smb-scale-bench samples the first server in sorted order for connections and locks.
first=$(printf '%s\n' "${addresses[@]}" | sort | head -1)
for i in 0 1; do [[ ${addresses[$i]} == "$first" ]] && first_pid=${pids[$i]}; done

# "RSS_KiB FDS CPU_S" of one daemon.
sample() {
  local pid=$1 rss fds ticks
  rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status")
  fds=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
  ticks=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
  echo "$rss $fds $(awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }')"
}
row() { printf '| %s | %s | %s | %s |\n' "$@"; }

echo "| phase | smbd RSS (MiB, each) | open fds (each) | detail |"
echo "|---|---|---|---|"
read -r rss0 fd0 _ < <(sample "${pids[0]}")
row "2 smbd, 1 GiB pools, idle" "$((rss0 / 1024))" "$fd0" "-"

coproc BENCH_BUFFERS { "$BENCH" --servers "$servers" --buffers "$BUFFERS"; }
read -r held <&"${BENCH_BUFFERS[0]}"
read -r rss1 fd1 _ < <(sample "${pids[0]}")
row "$BUFFERS buffers held" "$((rss1 / 1024))" "$fd1" \
  "$(jq -r '"create \(.create_s | floor) s; status \(.status_entries) entries in \(.status_s * 100 | round / 100) s; ls \(.list_entries) in \(.list_s * 100 | round / 100) s"' <<<"$held"); $(( (rss1 - rss0) * 1024 / BUFFERS )) B of RSS per buffer per server"
echo go >&"${BENCH_BUFFERS[1]}"
read -r destroyed <&"${BENCH_BUFFERS[0]}"
wait "$BENCH_BUFFERS_PID" 2>/dev/null || true
read -r rss2 fd2 _ < <(sample "${pids[0]}")
row "all destroyed" "$((rss2 / 1024))" "$fd2" "$(jq -r '"destroy \(.destroy_s | floor) s"' <<<"$destroyed")"

read -r crss0 cfd0 _ < <(sample "$first_pid")
coproc BENCH_CONNS { "$BENCH" --servers "$servers" --connections "$CONNECTIONS"; }
read -r held <&"${BENCH_CONNS[0]}"
read -r crss1 cfd1 _ < <(sample "$first_pid")
row "$CONNECTIONS idle connections (one server)" "$((crss1 / 1024))" "$cfd1" \
  "$(( (crss1 - crss0) * 1024 / CONNECTIONS )) B of RSS and $(( (cfd1 - cfd0) * 100 / CONNECTIONS / 100 )) fd per connection; $(jq -r '.connect_s * 100 | round / 100' <<<"$held") s to connect"
echo go >&"${BENCH_CONNS[1]}"
wait "$BENCH_CONNS_PID" 2>/dev/null || true
sleep 1
read -r crss2 cfd2 _ < <(sample "$first_pid")
row "connections closed" "$((crss2 / 1024))" "$cfd2" "-"

read -r _ _ cpu0 < <(sample "$first_pid")
locks=$("$BENCH" --servers "$servers" --locks "$LOCKS")
read -r lrss lfd cpu1 < <(sample "$first_pid")
row "$LOCKS locks taken and released" "$((lrss / 1024))" "$lfd" \
  "$(jq -r '"lock \(.lock_s * 100 | round / 100) s, unlock \(.unlock_s * 100 | round / 100) s"' <<<"$locks") (round trips included); smbd CPU $(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { printf "%.2f", b - a }') s"
