#!/usr/bin/env bash
# The Soft Memory Box demo, from a fresh Debian 12 machine to data moving
# through a striped buffer, then to a model training through the fabric:
#
#   1. installs the missing Debian packages (deploy/install-deps.sh),
#   2. builds the release preset (smbd, smb-bench, smbctl, and the Python
#      package smb with smb.torch: target smb_python; smbrun comes with it),
#   3. starts three memory servers: smbd --listen 127.0.0.1:0 --capacity 128M
#      (port 0: each picks a free loopback port and prints it when ready),
#   4. one process writes a 96 MiB buffer striped over all three
#      (smb-bench --op write --verify --keep --name demo),
#   5. another process opens it by name and reads it back, checking every byte
#      (smb-bench --op read --verify --name demo),
#   6. smbctl status / info demo show that each server holds a third,
#   7. stops the servers with SIGTERM (always, also on failure or Ctrl-C),
#   8. trains the torch digits example (plugins/torch/examples/train_digits.py)
#      under smbrun: 2 workers, 2 local smbd of its own, 8 epochs (some 15 s),
#      printing the test accuracy. Skipped, naming the Debian package, where
#      /usr/bin/python3 lacks torch, numpy or scikit-learn (--skip-training:
#      skipped anyway).
#
# Usage: ./run-demo.sh [--skip-deps] [--skip-build] [--skip-training] [--help]
# Environment: SMB_DEMO_PRESET (default release), SMB_DEMO_BUILD_DIR (default
#              build/$SMB_DEMO_PRESET), SMB_DEMO_SERVERS (default 3),
#              SMB_DEMO_CAPACITY (default 128M), SMB_DEMO_SIZE (default 96M),
#              SMB_DEMO_EPOCHS (training epochs, default 8),
#              UCX_TLS / SMB_DATA_PROTOCOL (passed through to the tools).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PRESET=${SMB_DEMO_PRESET:-release}
SERVER_COUNT=${SMB_DEMO_SERVERS:-3}
CAPACITY=${SMB_DEMO_CAPACITY:-128M}
SIZE=${SMB_DEMO_SIZE:-96M}
BLOCK=1M
NAME=demo
READY_TIMEOUT_S=30
STOP_TIMEOUT_S=10
EPOCHS=${SMB_DEMO_EPOCHS:-8}
TRAIN_TIMEOUT_S=120      # smbrun --timeout: a hung job cannot hang the demo
PYTHON=/usr/bin/python3  # Debian's: python3-torch is there, and smb._core is built for it

BUILD_DIR=${SMB_DEMO_BUILD_DIR:-"$ROOT/build/$PRESET"}
SMBD="$BUILD_DIR/smb-server/smbd"
SMB_BENCH="$BUILD_DIR/tools/smb-bench"
SMBCTL="$BUILD_DIR/tools/smbctl"
SMBRUN="$BUILD_DIR/tools/smbrun/smbrun"
LOG_DIR="$BUILD_DIR/demo-logs"

SERVER_PIDS=()
SERVER_ADDRS=()

section() { printf '\n\033[1m==== %s ====\033[0m\n' "$*"; }
info() { printf '  %s\n' "$*"; }
fail() { printf '\nrun-demo: FAILED: %s\n' "$*" >&2; exit 1; }

# Prints a command, then runs it.
show_and_run() {
  printf '\n$ %s\n' "$*"
  "$@"
}

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }

install_deps() {
  section "Dependencies (deploy/install-deps.sh)"
  "$ROOT/deploy/install-deps.sh"
}

# True when the build tree has the Python package (cmake leaves it out,
# saying why, where pybind11 or python3-dev is missing).
python_built() { grep -qx 'SMB_WITH_PYTHON:BOOL=ON' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null; }

build() {
  section "Build (cmake preset '$PRESET')"
  (cd "$ROOT" && cmake --preset "$PRESET" >/dev/null)
  # smb_python: smb._core and the smb package (smb.torch, smb.run) in
  # build/<preset>/python; the configure step above wrote smbrun.
  local -a targets=(smbd smb-bench smbctl)
  if python_built; then targets+=(smb_python); fi
  (cd "$ROOT" && cmake --build --preset "$PRESET" --target "${targets[@]}")
  local bin
  for bin in "$SMBD" "$SMB_BENCH" "$SMBCTL"; do
    [[ -x "$bin" ]] || fail "build produced no $bin"
  done
}

# Starts one smbd on a free loopback port; waits for "smbd ready on HOST:PORT".
start_server() {
  local index=$1
  local log="$LOG_DIR/smbd-$index.log"
  : >"$log"
  "$SMBD" --listen 127.0.0.1:0 --capacity "$CAPACITY" >"$log" 2>&1 &
  local pid=$!
  SERVER_PIDS+=("$pid")

  local deadline=$((SECONDS + READY_TIMEOUT_S)) line
  while :; do
    line=$(grep -s -m1 -o 'smbd ready on [^[:space:]]*' "$log" || true)
    if [[ -n "$line" ]]; then
      SERVER_ADDRS+=("${line#smbd ready on }")
      info "smbd #$index (pid $pid) ready on ${line#smbd ready on }  (log: ${log#"$ROOT"/})"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      cat "$log" >&2
      fail "smbd #$index exited before it was ready (log above)"
    fi
    if ((SECONDS >= deadline)); then
      cat "$log" >&2
      fail "smbd #$index not ready after ${READY_TIMEOUT_S}s (log above)"
    fi
    sleep 0.1
  done
}

start_servers() {
  section "Start $SERVER_COUNT memory servers (smbd --capacity $CAPACITY)"
  rm -rf "$LOG_DIR"
  mkdir -p "$LOG_DIR"
  local i
  for ((i = 1; i <= SERVER_COUNT; i++)); do
    start_server "$i"
  done
  SMB_SERVERS=$(IFS=,; printf '%s' "${SERVER_ADDRS[*]}")
  export SMB_SERVERS
  info "SMB_SERVERS=$SMB_SERVERS"
}

# SIGTERM to every server we started, then wait for a clean exit (exit 0).
stop_servers() {
  ((${#SERVER_PIDS[@]} > 0)) || return 0
  section "Stop the memory servers (SIGTERM)"
  local pid status
  for pid in "${SERVER_PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${SERVER_PIDS[@]}"; do
    local deadline=$((SECONDS + STOP_TIMEOUT_S))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      info "smbd pid $pid ignored SIGTERM for ${STOP_TIMEOUT_S}s: killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    status=0
    wait "$pid" 2>/dev/null || status=$?
    info "smbd pid $pid exited with status $status"
  done
  SERVER_PIDS=()
}

on_exit() {
  local status=$?
  trap - EXIT INT TERM
  stop_servers || true
  if ((status == 0)); then
    section "Demo finished: OK"
  else
    printf '\nrun-demo: failed (exit status %d); server logs are in %s\n' "$status" "${LOG_DIR#"$ROOT"/}" >&2
  fi
  exit "$status"
}

write_buffer() {
  section "Process 1: create '$NAME' ($SIZE striped over $SERVER_COUNT servers) and write it"
  show_and_run "$SMB_BENCH" --op write --size "$SIZE" --block "$BLOCK" --verify --keep --name "$NAME" \
    || fail "smb-bench write failed"
}

read_buffer() {
  section "Process 2: open '$NAME' by name and read it back, checking every byte"
  show_and_run "$SMB_BENCH" --op read --name "$NAME" --size "$SIZE" --block "$BLOCK" --verify \
    || fail "smb-bench read failed"
}

show_shares() {
  section "Where the bytes live"
  show_and_run "$SMBCTL" status || fail "smbctl status failed"
  show_and_run "$SMBCTL" info "$NAME" || fail "smbctl info failed"
}

# Checks, from what each server itself reports (smbctl --json status), that
# every server holds its share of the buffer: size/N, give or take a stripe.
check_shares() {
  section "Check: each server holds 1/$SERVER_COUNT of '$NAME'"
  local status_json
  status_json=$("$SMBCTL" --json status) || fail "smbctl --json status failed"
  python3 - "$status_json" "$NAME" "$(numfmt --from=iec "$SIZE")" "$SERVER_COUNT" \
    "$(numfmt --from=iec "$BLOCK")" <<'EOF' || fail "the servers do not each hold a share of '$NAME'"
import json, sys
doc, name = json.loads(sys.argv[1]), sys.argv[2]
size, count, stripe = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
ok, total = len(doc["servers"]) == count, 0
for server in doc["servers"]:
    held = sum(b["bytes"] for b in server["buffers"] if b["name"] == name)
    total += held
    good = abs(held - size / count) <= stripe
    ok = ok and good
    print(f"  {server['address']}: {held / 2**20:.1f} MiB of {name} "
          f"({100.0 * held / size:.1f}%) {'ok' if good else 'WRONG'}")
ok = ok and total == size
print(f"  total {total / 2**20:.1f} MiB of {size / 2**20:.1f} MiB: {'OK' if ok else 'MISMATCH'}")
sys.exit(0 if ok else 1)
EOF
}

# The Debian packages whose modules the training needs and /usr/bin/python3
# lacks (find_spec: no slow import of torch just to look).
missing_python_packages() {
  [[ -x $PYTHON ]] || { echo python3; return 0; }
  "$PYTHON" -c 'import importlib.util as u
need = {"torch": "python3-torch", "numpy": "python3-numpy", "sklearn": "python3-sklearn"}
print(" ".join(p for m, p in need.items() if u.find_spec(m) is None))'
}

train() {
  section "Training: the torch digits example under smbrun (2 workers, 2 local smbd)"
  # A missing package skips this part, not the demo: the bytes moved above.
  local missing
  missing=$(missing_python_packages)
  if [[ -n $missing ]]; then
    info "training skipped: $PYTHON lacks the Debian package(s) $missing"
    info "install: apt-get install $missing (as root; or deploy/install-deps.sh), then run the demo again"
    return 0
  fi
  if ! python_built; then
    info "training skipped: ${BUILD_DIR#"$ROOT"/} has no Python package (SMB_WITH_PYTHON=OFF;"
    info "cmake's line 'Python plugins: OFF (...)' says why, e.g. no pybind11-dev or python3-dev)"
    return 0
  fi
  local need
  for need in "$SMBRUN" "$BUILD_DIR"/python/smb/_core*.so; do
    [[ -e $need ]] || fail "no $need: build it with cmake --build --preset $PRESET --target smb_python"
  done

  # smbrun starts 2 smbd of its own (the demo's are stopped) and the 2
  # workers; PYTHONPATH lets the workers import smb.torch from the build.
  local out="$LOG_DIR/train.out" started=$SECONDS accuracy
  show_and_run env PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}" \
    "$SMBRUN" -np 2 --local-servers 2 --capacity 64M --timeout "$TRAIN_TIMEOUT_S" \
    --server-logs "$LOG_DIR/train-servers" -- \
    "$PYTHON" "$ROOT/plugins/torch/examples/train_digits.py" --epochs "$EPOCHS" | tee "$out" ||
    fail "training under smbrun failed (exit status ${PIPESTATUS[0]})"
  accuracy=$(grep -o 'test accuracy [0-9.]*' "$out" | tail -n 1 | cut -d' ' -f3)
  [[ -n $accuracy ]] || fail "the training printed no test accuracy"
  info "trained in $((SECONDS - started)) s: final test accuracy $accuracy (360 held-out digits, $EPOCHS epochs)"
}

main() {
  local skip_deps=0 skip_build=0 skip_training=0 arg
  for arg in "$@"; do
    case "$arg" in
      --skip-deps) skip_deps=1 ;;
      --skip-build) skip_build=1 ;;
      --skip-training) skip_training=1 ;;
      -h | --help) usage; return 0 ;;
      *) printf 'run-demo: unknown option %s (try --help)\n' "$arg" >&2; return 2 ;;
    esac
  done

  ((skip_deps)) || install_deps
  ((skip_build)) || build

  trap on_exit EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  start_servers
  write_buffer
  read_buffer
  show_shares
  check_shares
  stop_servers
  ((skip_training)) || train
}

main "$@"
