#!/usr/bin/env bash
# Runs every libFuzzer target for a bounded time from the seed corpus in
# tests/fuzz/corpus, and fails on any finding (crash, sanitizer report,
# leak, timeout). The corpus in the repository is only read: what a run
# learns goes to a scratch directory.
#
#   tests/fuzz/run.sh [--seconds N] [--build-dir DIR] [TARGET...]
#     --seconds N     time per target (default 60; SMB_FUZZ_SECONDS overrides the default)
#     --build-dir DIR where the fuzz preset built the targets (default build/fuzz)
#     TARGET          fuzz_frame fuzz_layout fuzz_data_channel fuzz_requests fuzz_checkpoint
#                     fuzz_config (default: all)
#
# A longer hunt is the same command: tests/fuzz/run.sh --seconds 3600 fuzz_requests
# Findings are kept in build/fuzz/findings/TARGET/ with the command to replay them.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SECONDS_PER_TARGET=${SMB_FUZZ_SECONDS:-60}
BUILD_DIR=$ROOT/build/fuzz
TARGETS=()
while (($# > 0)); do
  case "$1" in
    --seconds) SECONDS_PER_TARGET=$2; shift ;;
    --build-dir) BUILD_DIR=$2; shift ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    -*) echo "fuzz: unknown option $1 (try --help)" >&2; exit 2 ;;
    *) TARGETS+=("$1") ;;
  esac
  shift
done
((${#TARGETS[@]} > 0)) || TARGETS=(fuzz_frame fuzz_layout fuzz_data_channel fuzz_requests fuzz_checkpoint fuzz_config)

# UBSan reports end the run (the build uses -fno-sanitize-recover); leaks count.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=()
for target in "${TARGETS[@]}"; do
  binary=$BUILD_DIR/tests/fuzz/$target
  seeds=$ROOT/tests/fuzz/corpus/$target
  if [[ ! -x $binary ]]; then
    echo "fuzz: $binary is missing: cmake --preset fuzz && cmake --build --preset fuzz" >&2
    exit 2
  fi
  work=$(mktemp -d)
  findings=$BUILD_DIR/findings/$target
  mkdir -p "$findings"
  echo "==== $target: ${SECONDS_PER_TARGET} s from $(find "$seeds" -type f | wc -l) seeds"
  log=$work/log
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: memory growth is a finding.
  mkdir -p "$work/corpus"
  if "$binary" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$findings/" "$work/corpus" "$seeds" >"$log" 2>&1 </dev/null; then
    grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb|^Done ' "$log" | sed 's/^/  /'
    echo "  no findings"
  else
    tail -n 60 "$log"
    echo "fuzz: $target found a problem; replay with: $binary $findings/<file>" >&2
    failed+=("$target")
  fi
  rm -rf "$work"
done

if ((${#failed[@]} > 0)); then
  echo "fuzz: findings in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#TARGETS[@]} target(s), ${SECONDS_PER_TARGET} s each, no findings"
