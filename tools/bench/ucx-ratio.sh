#!/usr/bin/env bash
# How close does the fabric get to raw UCX? A benchmark, not a test.
#
# In one run, for each UCX transport on loopback -- shared memory (UCX_TLS
# unset: UCX picks shm/cma itself) and TCP (UCX_TLS=tcp,self for server and
# client) -- it measures
#   - ucx_perftest -t ucp_put_bw / ucp_get_bw (ucp_get on UCX < 1.14) and
#     ucp_am_bw, 1 MiB messages, server and client on separate CPUs,
#   - smb-bench --op write / --op read, 1 MiB blocks over a 256 MiB buffer,
#     against one smbd on the same transport,
# and writes the ratios smb-bench / ucx_perftest to docs/benchmarks.md.
#
# Usage: tools/bench/ucx-ratio.sh [--output FILE] [--perftest-only] [--skip-build]
#   --output FILE     where to write the markdown (default docs/benchmarks.md)
#   --perftest-only   measure only ucx_perftest (no smbd/smb-bench)
#   --skip-build      use the binaries already in build/$PRESET
# Environment: PRESET (release), PERFTEST_ITERS (shm 4000, tcp 1000),
#   PERFTEST_WARMUP (100), BENCH_ITERS (4), BENCH_DEPTH (1: synchronous 1 MiB ops),
#   BENCH_SIZE (256M), BENCH_TIMEOUT_S (600).
# If any measurement fails the report goes to build/$PRESET/ucx-ratio/ instead,
# the exit status is 1, and docs/benchmarks.md is left alone.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PRESET=${PRESET:-release}
BUILD_DIR="$ROOT/build/$PRESET"
SMBD="$BUILD_DIR/smb-server/smbd"
SMB_BENCH="$BUILD_DIR/tools/smb-bench"
SMBCTL="$BUILD_DIR/tools/smbctl"
WORK="$BUILD_DIR/ucx-ratio"
RESULTS="$WORK/results.tsv"     # transport  tool  op  bytes_per_s  detail
COMMANDS="$WORK/commands.txt"   # every measured command, as run
MSG_SIZE=1048576
BLOCK=1M
# Like ucx_perftest: one 1 MiB region, moved again and again (BENCH_SIZE=256M
# walks DRAM instead; BENCH_ITERS unset: as many passes as perftest iterations).
BENCH_SIZE=${BENCH_SIZE:-1M}
BENCH_ITERS=${BENCH_ITERS:-}
BENCH_DEPTH=${BENCH_DEPTH:-1}
BENCH_TIMEOUT_S=${BENCH_TIMEOUT_S:-600}
PERFTEST_WARMUP=${PERFTEST_WARMUP:-100}
PERFTEST_TIMEOUT_S=300
OUTPUT="$ROOT/docs/benchmarks.md"

# Transports: label | UCX_TLS ("" = unset) | perftest iterations
TRANSPORTS=(
  "shared memory||${PERFTEST_ITERS:-4000}"
  "tcp|tcp,self|${PERFTEST_ITERS:-1000}"
)

# Server side on one CPU, client side on another (when there are two).
if (($(nproc) >= 2)); then SERVER_CPU=0 CLIENT_CPU=1; else SERVER_CPU=0 CLIENT_CPU=0; fi

BACKGROUND_PIDS=()
FAILURES=0

section() { printf '\n\033[1m==== %s ====\033[0m\n' "$*" >&2; }
note() { printf '  %s\n' "$*" >&2; }
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }

# Runs "$@" with UCX_TLS=$1 (or with UCX_TLS removed when $1 is empty).
# A plain command, not a function, where it runs in the background ("&"):
# then $! is the process itself (env and taskset exec), which SIGTERM reaches.
tls_env() { if [[ -n "$1" ]]; then echo "env UCX_TLS=$1"; else echo "env -u UCX_TLS"; fi; }
with_tls() {
  local -a prefix
  read -r -a prefix <<<"$(tls_env "$1")"
  shift
  "${prefix[@]}" "$@"
}

tls_prefix() { if [[ -n "$1" ]]; then printf 'UCX_TLS=%s ' "$1"; else printf '(UCX_TLS unset) '; fi; }

record_command() { printf '%s%s\n' "$(tls_prefix "$1")" "$2" >>"$COMMANDS"; }

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for_listen() {
  local port=$1 deadline=$((SECONDS + 15))
  while ! ss -Hltn "sport = :$port" | grep -q .; do
    ((SECONDS < deadline)) || return 1
    sleep 0.05
  done
}

# Waits up to $2 seconds for pid $1, then kills it. Returns its exit status.
reap() {
  local pid=$1 limit=$2 deadline status=0
  deadline=$((SECONDS + limit))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -TERM "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null || status=$?
  return "$status"
}

cleanup() {
  local pid
  for pid in "${BACKGROUND_PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${BACKGROUND_PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
}

fail_measurement() {
  note "FAILED: $*"
  FAILURES=$((FAILURES + 1))
}

# ---------------------------------------------------------------- ucx_perftest

perftest_get_test() {
  if ucx_perftest -h 2>&1 | grep -qw ucp_get_bw; then echo ucp_get_bw; else echo ucp_get; fi
}

# perftest LABEL TLS TEST ITERS OP: one server/client pair; records MiB/s -> bytes/s.
perftest() {
  local label=$1 tls=$2 test=$3 iters=$4 op=$5
  local port log_server log_client server_pid mibps
  port=$(free_port)
  log_server="$WORK/perftest-${tls:-shm}-$test-server.log"
  log_client="$WORK/perftest-${tls:-shm}-$test-client.log"
  local -a prefix
  read -r -a prefix <<<"$(tls_env "$tls")"
  "${prefix[@]}" taskset -c "$SERVER_CPU" ucx_perftest -p "$port" >"$log_server" 2>&1 &
  server_pid=$!
  BACKGROUND_PIDS+=("$server_pid")
  if ! wait_for_listen "$port"; then
    reap "$server_pid" 0 || true
    fail_measurement "ucx_perftest server on port $port did not listen (log: $log_server)"
    return 0
  fi
  local client=(ucx_perftest 127.0.0.1 -p "$port" -t "$test" -s "$MSG_SIZE" -n "$iters" -w "$PERFTEST_WARMUP")
  record_command "$tls" "taskset -c $SERVER_CPU ucx_perftest -p $port &  # server"
  record_command "$tls" "taskset -c $CLIENT_CPU ${client[*]}"
  note "$(tls_prefix "$tls")${client[*]}"
  if ! with_tls "$tls" timeout "$PERFTEST_TIMEOUT_S" taskset -c "$CLIENT_CPU" "${client[@]}" >"$log_client" 2>&1; then
    reap "$server_pid" 0 || true
    fail_measurement "ucx_perftest $test over $label (log: $log_client)"
    return 0
  fi
  reap "$server_pid" 10 || true
  # Final: iters p50 avg-overhead overall-overhead avg-bw overall-bw avg-rate overall-rate
  mibps=$(awk '/^Final:/ { print $7 }' "$log_client")
  if [[ -z "$mibps" ]]; then
    fail_measurement "no 'Final:' line from ucx_perftest $test over $label (log: $log_client)"
    return 0
  fi
  note "  -> $mibps MB/s (ucx_perftest MB = 2^20 bytes)"
  printf '%s\tucx_perftest\t%s\t%s\t%s\n' "$label" "$op" \
    "$(awk -v m="$mibps" 'BEGIN { printf "%.0f", m * 1048576 }')" "$test" >>"$RESULTS"
}

# ---------------------------------------------------------------- smbd + smb-bench

SMBD_PID=
SMBD_ADDR=

start_smbd() {
  local tls=$1 log=$2 capacity line deadline
  capacity=$(($(numfmt --from=iec "$BENCH_SIZE") * 2))
  : >"$log"
  local -a prefix
  read -r -a prefix <<<"$(tls_env "$tls")"
  "${prefix[@]}" taskset -c "$SERVER_CPU" "$SMBD" --listen 127.0.0.1:0 --capacity "$capacity" >"$log" 2>&1 &
  SMBD_PID=$!
  BACKGROUND_PIDS+=("$SMBD_PID")
  record_command "$tls" "taskset -c $SERVER_CPU smbd --listen 127.0.0.1:0 --capacity $capacity &"
  deadline=$((SECONDS + 30))
  while :; do
    line=$(grep -s -m1 -o 'smbd ready on [^[:space:]]*' "$log" || true)
    if [[ -n "$line" ]]; then
      SMBD_ADDR=${line#smbd ready on }
      note "smbd (pid $SMBD_PID) ready on $SMBD_ADDR"
      return 0
    fi
    if ! kill -0 "$SMBD_PID" 2>/dev/null || ((SECONDS >= deadline)); then
      cat "$log" >&2
      return 1
    fi
    sleep 0.1
  done
}

stop_smbd() {
  [[ -n "$SMBD_PID" ]] || return 0
  kill -TERM "$SMBD_PID" 2>/dev/null || true
  reap "$SMBD_PID" 10 || note "smbd exited with status $?"
  SMBD_PID=
}

# smb_bench LABEL TLS OP NAME: records bytes/s and the data path smb-bench reports.
smb_bench() {
  local label=$1 tls=$2 op=$3 name=$4 iters=$5 log json
  log="$WORK/smb-bench-${tls:-shm}-$op.json"
  local cmd=(smb-bench --servers "$SMBD_ADDR" --name "$name" --op "$op" --size "$BENCH_SIZE"
             --block "$BLOCK" --iters "$iters" --depth "$BENCH_DEPTH" --json)
  record_command "$tls" "taskset -c $CLIENT_CPU ${cmd[*]}"
  note "$(tls_prefix "$tls")${cmd[*]}"
  if ! with_tls "$tls" timeout "$BENCH_TIMEOUT_S" taskset -c "$CLIENT_CPU" "$SMB_BENCH" "${cmd[@]:1}" \
      >"$log" 2>"$log.stderr"; then
    cat "$log.stderr" >&2
    fail_measurement "smb-bench --op $op over $label (log: $log.stderr)"
    return 0
  fi
  json=$(tail -n 1 "$log")
  python3 - "$json" "$label" "$op" >>"$RESULTS" <<'EOF'
import json, sys
doc, label, op = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
paths = "; ".join(p.split(": ", 1)[-1] for p in doc.get("paths", [])) or "?"
print(f"{label}\tsmb-bench\t{op}\t{doc['bandwidth_bytes_per_s']:.0f}\t{paths}")
EOF
  note "  -> $(tail -n 1 "$RESULTS" | cut -f4) bytes/s via $(tail -n 1 "$RESULTS" | cut -f5)"
}

measure_smb() {
  local label=$1 tls=$2 iters=${BENCH_ITERS:-$3} name
  name="ucx-ratio-$$"
  if ! start_smbd "$tls" "$WORK/smbd-${tls:-shm}.log"; then
    fail_measurement "smbd over $label did not start"
    return 0
  fi
  smb_bench "$label" "$tls" write "$name" "$iters"
  smb_bench "$label" "$tls" read "$name" "$iters"
  with_tls "$tls" "$SMBCTL" --servers "$SMBD_ADDR" rm "$name" >/dev/null 2>&1 || true
  stop_smbd
}

# ---------------------------------------------------------------- report

write_report() {
  local output=$1 cpu ucx commit
  cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)
  ucx=$(ucx_info -v | sed -n 's/^# Version[[:space:]]*//p' | head -n 1)
  commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
  if [[ -n "$(git -C "$ROOT" status --porcelain 2>/dev/null)" ]]; then commit="$commit (with local changes)"; fi
  mkdir -p "$(dirname "$output")"
  # Sections other benchmarks keep in the same file (from "## Server-side
  # accumulate" on) survive a rewrite.
  local kept=""
  [[ -f "$output" ]] && kept=$(sed -n '/^## Server-side accumulate/,$p' "$output")
  python3 - "$RESULTS" "$COMMANDS" "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(nproc)" "${cpu:-unknown}" \
    "${ucx:-unknown}" "$commit" "$BENCH_SIZE" "${BENCH_ITERS:-as many as ucx_perftest}" "$BENCH_DEPTH" "$FAILURES" >"$output" <<'EOF'
import sys
results_file, commands_file, date, nproc, cpu, ucx, commit, size, iters, depth, failures = sys.argv[1:]
rows = {}
for line in open(results_file):
    label, tool, op, bps, detail = line.rstrip("\n").split("\t")
    rows[(label, tool, op)] = (float(bps), detail)
MiB = 1 << 20
def fmt(v): return f"{v / MiB:,.0f}" if v is not None else "n/a"
def ratio(a, b): return f"{a / b:.2f}" if a is not None and b else "n/a"
def get(label, tool, op):
    r = rows.get((label, tool, op))
    return (r[0], r[1]) if r else (None, "")

print("# Benchmarks: libsmb against raw UCX\n")
print("Generated by `tools/bench/ucx-ratio.sh`; rerun it to refresh this file.\n")
print(f"- date: {date}")
print(f"- machine: {nproc} CPUs (`nproc`), {cpu}; server side pinned to CPU 0, client side to CPU 1")
print(f"- UCX: {ucx} (`ucx_info -v`)")
print(f"- commit: {commit}")
if failures != "0":
    print(f"- **{failures} measurement(s) failed**; their cells read n/a")
print()
print("Absolute numbers from a shared or virtual machine are noise: they move with")
print("the neighbours' load from run to run. The ratios, taken back to back on the")
print("same machine and transport, are what this file tracks. The target on shared")
print("memory is a ratio of at least 0.95.\n")
print("## smb-bench / ucx_perftest\n")
print(f"smb-bench moves {size} per pass ({iters} passes) in 1 MiB blocks, {depth} op(s) in")
print("flight, through one smbd. ucx_perftest moves 1 MiB messages between two")
print("processes on the same UCX transport. Bandwidth in MiB/s (ucx_perftest's \"MB/s\").\n")
print("| transport | op | ucx_perftest test | ucx_perftest MiB/s | smb-bench MiB/s | **ratio** | vs ucp_am_bw (MiB/s, ratio) | data path libsmb chose |")
print("|---|---|---|---:|---:|---:|---|---|")
labels = []
for (label, _, _) in rows:
    if label not in labels: labels.append(label)
for label in labels:
    am, _ = get(label, "ucx_perftest", "am")
    for op in ("write", "read"):
        ref, test = get(label, "ucx_perftest", op)
        smb, path = get(label, "smb-bench", op)
        print(f"| {label} | {op} | `{test or '?'}` | {fmt(ref)} | {fmt(smb)} | **{ratio(smb, ref)}** "
              f"| {fmt(am)}, {ratio(smb, am)} | {path or 'n/a'} |")
print()
print("## Which data protocol and why\n")
print("libsmb chooses per server (`SMB_DATA_PROTOCOL=auto`, the default): one-sided RMA")
print("(`ucp_put_nbx`/`ucp_get_nbx`; a flush unless the put completed at once) on UCX's")
print("shared-memory RMA lanes (posix/sysv mapping, CMA), and the `am` protocol")
print("(active messages the server copies into, or sends from, the segment) elsewhere,")
print("e.g. over TCP, where UCX emulates RMA in software, a round trip per")
print("fragment through the server's progress loop, so put/get run well below what the")
print("same socket streams as active messages. The `ucp_am_bw` column is that ceiling.")
print("The last column is what smb-bench reported (`paths` in its JSON). Force a")
print("protocol with `SMB_DATA_PROTOCOL=rma` or `=am` to compare.\n")
print(f"Both move a {size} region again and again in 1 MiB operations (with the default")
print("1 MiB, like for like: the region stays in the CPU caches on shared memory).")
print("The target for shared memory is a ratio of at least 0.95; run-to-run noise on")
print("this shared machine is about 5%, so compare several runs before concluding.\n")
print("## Commands\n")
print("```sh")
for line in open(commands_file):
    print(line.rstrip("\n"))
print("```")
EOF
  [[ -z "$kept" ]] || printf '\n%s\n' "$kept" >>"$output"
}

# ---------------------------------------------------------------- main

main() {
  local perftest_only=0 skip_build=0
  while (($# > 0)); do
    case "$1" in
      --output) OUTPUT=$(realpath -m "$2"); shift ;;
      --perftest-only) perftest_only=1 ;;
      --skip-build) skip_build=1 ;;
      -h | --help) usage; return 0 ;;
      *) echo "ucx-ratio: unknown option $1 (try --help)" >&2; return 2 ;;
    esac
    shift
  done
  trap cleanup EXIT

  if ((!perftest_only && !skip_build)); then
    section "Build (preset '$PRESET')"
    (cd "$ROOT" && cmake --preset "$PRESET" >/dev/null && cmake --build --preset "$PRESET" --target smbd smb-bench smbctl)
  fi
  rm -rf "$WORK"
  mkdir -p "$WORK"
  : >"$RESULTS"
  : >"$COMMANDS"

  local get_test entry label tls iters
  get_test=$(perftest_get_test)
  for entry in "${TRANSPORTS[@]}"; do
    IFS='|' read -r label tls iters <<<"$entry"
    section "$label: ucx_perftest ($(tls_prefix "$tls"))"
    perftest "$label" "$tls" ucp_put_bw "$iters" write
    perftest "$label" "$tls" "$get_test" "$iters" read
    perftest "$label" "$tls" ucp_am_bw "$iters" am
    if ((!perftest_only)); then
      section "$label: smbd + smb-bench ($(tls_prefix "$tls"))"
      measure_smb "$label" "$tls" "$iters"
    fi
  done

  local output=$OUTPUT
  if ((FAILURES > 0 || perftest_only)) && [[ "$OUTPUT" == "$ROOT/docs/benchmarks.md" ]]; then
    output="$WORK/benchmarks.md"
  fi
  write_report "$output"
  section "Report: ${output#"$ROOT"/}"
  cat "$output"
  if ((FAILURES > 0)); then
    echo "ucx-ratio: $FAILURES measurement(s) failed; docs/benchmarks.md left as it was" >&2
    return 1
  fi
}

main "$@"
