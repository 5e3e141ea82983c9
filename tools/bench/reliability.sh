#!/usr/bin/env bash
# The figures in docs/reliability.md: two smbd on loopback, then
#   - N buffers (150-character names, one 4 KiB stripe per server) created,
#     listed with status and ls (paged), destroyed;
#   - C idle control connections held on one server;
#   - L disjoint range locks taken and released from one connection;
# and what each cost the daemons (RSS, open descriptors, CPU, SysV segments
# they created), sampled from /proc before, while held and after. Each phase
# gets a fresh pair of daemons: memory a phase frees stays in smbd's heap and
# would hide what the next one costs. Prints a markdown table.
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
pids=() addresses=()
cleanup() {
  local rc=$?
  stop_servers
  if ((rc != 0)); then
    for f in "$work"/err*; do [[ -s $f ]] && { echo "== smbd log ${f##*/}:"; tail -n 20 "$f"; }; done >&2
  fi
  rm -rf "$work"
}
trap cleanup EXIT
stop_servers() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; pids=() addresses=(); }

# Two fresh daemons; first / first_pid: the first server in sorted order,
# the one smb-scale-bench uses for connections and locks.
start_servers() {
  local i
  stop_servers
  for i in 0 1; do
    "$SMBD" --listen 127.0.0.1:0 --capacity 1G --max-connections $((CONNECTIONS + 100)) --log-level warn \
      >"$work/out$i" 2>>"$work/err$i" &
    pids+=($!)
    for _ in $(seq 100); do grep -q 'smbd ready on' "$work/out$i" && break; sleep 0.1; done
    addresses+=("$(sed -n 's/^smbd ready on //p' "$work/out$i")")
    [[ -n ${addresses[$i]} ]] || { echo "reliability: smbd did not start" >&2; exit 1; }
  done
  servers=$(IFS=,; echo "${addresses[*]}")
  first=$(printf '%s\n' "${addresses[@]}" | sort | head -1)
  for i in 0 1; do if [[ ${addresses[$i]} == "$first" ]]; then first_pid=${pids[$i]}; fi; done
}

# "RSS_KiB FDS CPU_S SHM" of one daemon; SHM: the SysV segments it created.
sample() {
  local pid=$1 rss fds ticks shm
  rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status")
  fds=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
  ticks=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
  shm=$(awk -v p="$pid" 'NR > 1 && $5 == p { n++ } END { print n + 0 }' /proc/sysvipc/shm)
  echo "$rss $fds $(awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }') $shm"
}
row() { printf '| %s | %s | %s | %s | %s |\n' "$@"; }
per() { awk -v d="$1" -v n="$2" -v f="$3" 'BEGIN { printf f, d / n }'; }  # per DELTA COUNT FORMAT
s2() { jq -r "$1 * 100 | round / 100" <<<"$2"; }                          # a JSON field, 2 decimals

echo "| phase | smbd RSS (MiB) | open fds | SysV segments | detail |"
echo "|---|---|---|---|---|"

start_servers
read -r a0 af0 _ as0 < <(sample "${pids[0]}")
read -r b0 bf0 _ bs0 < <(sample "${pids[1]}")
row "2 fresh smbd, 1 GiB pools, idle" "$((a0 / 1024)) / $((b0 / 1024))" "$af0 / $bf0" "$as0 / $bs0" "-"
coproc BENCH_BUFFERS { "$BENCH" --servers "$servers" --buffers "$BUFFERS"; }
read -r held <&"${BENCH_BUFFERS[0]}"
read -r a1 af1 _ as1 < <(sample "${pids[0]}")
read -r b1 bf1 _ bs1 < <(sample "${pids[1]}")
row "$BUFFERS buffers held" "$((a1 / 1024)) / $((b1 / 1024))" "$af1 / $bf1" "$as1 / $bs1" \
  "create $(s2 .create_s "$held") s; status $(jq .status_entries <<<"$held") entries in $(s2 .status_s "$held") s; ls $(jq .list_entries <<<"$held") in $(s2 .list_s "$held") s; per buffer and server $(per $(((a1 - a0 + b1 - b0) * 512)) "$BUFFERS" %.0f) B of RSS; fds +$((af1 - af0)) / +$((bf1 - bf0)) in all (the bench's own connections)"
echo go >&"${BENCH_BUFFERS[1]}"
read -r destroyed <&"${BENCH_BUFFERS[0]}"
wait "$BENCH_BUFFERS_PID" 2>/dev/null || true
read -r a2 af2 _ as2 < <(sample "${pids[0]}")
read -r b2 bf2 _ bs2 < <(sample "${pids[1]}")
row "all destroyed" "$((a2 / 1024)) / $((b2 / 1024))" "$af2 / $bf2" "$as2 / $bs2" "destroy $(s2 .destroy_s "$destroyed") s"

start_servers
read -r c0 cf0 _ cs0 < <(sample "$first_pid")
row "fresh smbd, idle (first server from here)" "$((c0 / 1024))" "$cf0" "$cs0" "-"
coproc BENCH_CONNS { "$BENCH" --servers "$servers" --connections "$CONNECTIONS"; }
read -r held <&"${BENCH_CONNS[0]}"
read -r c1 cf1 _ cs1 < <(sample "$first_pid")
row "$CONNECTIONS idle connections" "$((c1 / 1024))" "$cf1" "$cs1" \
  "per connection $(per $(((c1 - c0) * 1024)) "$CONNECTIONS" %.0f) B of RSS, $(per $((cf1 - cf0)) "$CONNECTIONS" %.2f) fd; $(s2 .connect_s "$held") s to connect"
echo go >&"${BENCH_CONNS[1]}"
wait "$BENCH_CONNS_PID" 2>/dev/null || true
sleep 1
read -r c2 cf2 _ cs2 < <(sample "$first_pid")
row "connections closed" "$((c2 / 1024))" "$cf2" "$cs2" "-"

start_servers
read -r l0 lf0 cpu0 ls0 < <(sample "$first_pid")
row "fresh smbd, idle" "$((l0 / 1024))" "$lf0" "$ls0" "-"
coproc BENCH_LOCKS { "$BENCH" --servers "$servers" --locks "$LOCKS"; }
read -r held <&"${BENCH_LOCKS[0]}"
read -r l1 lf1 cpu1 ls1 < <(sample "$first_pid")
row "$LOCKS locks held (one name)" "$((l1 / 1024))" "$lf1" "$ls1" \
  "lock $(s2 .lock_s "$held") s (round trips included); smbd CPU $(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { printf "%.2f", b - a }') s; per lock $(per $(((l1 - l0) * 1024)) "$LOCKS" %.0f) B of RSS"
echo go >&"${BENCH_LOCKS[1]}"
read -r released <&"${BENCH_LOCKS[0]}"
wait "$BENCH_LOCKS_PID" 2>/dev/null || true
read -r l2 lf2 cpu2 ls2 < <(sample "$first_pid")
row "all released" "$((l2 / 1024))" "$lf2" "$ls2" \
  "unlock $(s2 .unlock_s "$released") s; smbd CPU $(awk -v a="$cpu1" -v b="$cpu2" 'BEGIN { printf "%.2f", b - a }') s"
