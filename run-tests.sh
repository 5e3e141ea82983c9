#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite:
#
#   1. deploy/install-deps.sh (skips apt when everything is installed), and
#      Caffe for the Caffe plugin (plugins/caffe/build-caffe.sh: built once
#      from ../shared/vendor into ~/.cache/smb, then reused),
#   2. the 'ci' preset: release build, warnings as errors; ctest --preset ci,
#   3. the 'asan' preset: ASan + UBSan debug build; ctest --preset asan
#      (without the 20,000-buffer scale test, 10 minutes under ASan: the ci
#      preset runs it),
#   4. the 'fuzz' preset: the libFuzzer targets (clang), each run for a
#      bounded time from its seed corpus (tests/fuzz/run.sh; SMB_FUZZ_SECONDS,
#      default 30 here).
#
# Long tests (label "long": the whole soft-RoCE suite, 30 minutes and more
# under emulation) are left out; `ctest --test-dir build/ci -L long` runs them.
# The whole run takes about 50 minutes on the 2-core CI machine.
#
# Build failures stop at once; failing tests are reported, the next stage
# still runs, and the exit status is non-zero if anything failed. A test
# that fails and then passes when run again alone is reported as FLAKY in
# the summary and does not fail the run.
#
# Usage: ./run-tests.sh [--quick] [--skip-deps] [--help] [-- CTEST-ARGS...]
#   --quick      skip the ASan/UBSan and fuzz stages (for quick local runs; CI runs all)
#   --skip-deps  do not run deploy/install-deps.sh
#   -- ARGS      extra arguments for every ctest run, e.g. -- -L unit
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FAILED_STAGES=()
FAILED_TESTS=()
FLAKY_TESTS=()
CTEST_ARGS=()

section() { printf '\n\033[1m==== %s ====\033[0m\n' "$*"; }
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }

install_deps() {
  section "Dependencies (deploy/install-deps.sh)"
  "$ROOT/deploy/install-deps.sh"
  section "Caffe for the Caffe plugin (plugins/caffe/build-caffe.sh, cached)"
  local rc=0
  "$ROOT/plugins/caffe/build-caffe.sh" || rc=$?
  case $rc in
    0) ;;
    77) echo "run-tests: no Caffe source tarball: the Caffe plugin and its tests are left out" ;;
    *) echo "run-tests: building Caffe FAILED: the Caffe plugin and its tests are left out" >&2
       FAILED_STAGES+=(caffe) ;;
  esac
}

# Compiler cache: CI runs on the same machine each time, so unchanged files
# (most of them) are not compiled again. CMake reads these when it
# configures a new build directory.
if command -v ccache >/dev/null 2>&1; then
  export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-ccache}
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$ROOT}  # hits across clones in other directories
  # ...which needs the compile directory left out of the hash: with -g,
  # ccache hashes it by default, and every new clone compiled everything anew.
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-20G}  # four presets' objects (the default 5 GB evicts)
fi

# Configures and builds one preset; a failure ends the run.
build_preset() {
  local preset=$1
  section "Build: preset '$preset'"
  (cd "$ROOT" && cmake --preset "$preset") || { echo "run-tests: configuring '$preset' failed" >&2; exit 1; }
  (cd "$ROOT" && cmake --build --preset "$preset") || { echo "run-tests: building '$preset' failed" >&2; exit 1; }
}

# Runs one preset's tests; a failure is recorded, not fatal. Tests that fail
# are run once more, alone: one that passes then is a flake, not a failure,
# and is named in the summary as one (to be fixed, not forgotten).
test_preset() {
  local preset=$1
  local failed="$ROOT/build/$preset/Testing/Temporary/LastTestsFailed.log"
  section "Tests: ctest --preset $preset ${CTEST_ARGS[*]}"
  if (cd "$ROOT" && ctest --preset "$preset" "${CTEST_ARGS[@]}"); then
    echo "run-tests: '$preset' tests passed"
    return 0
  fi
  local names
  names=$(cut -d: -f2- "$failed" 2>/dev/null | paste -sd' ')
  section "Tests: the failed ones again, alone: $names"
  if [[ -n $names ]] && (cd "$ROOT" && ctest --preset "$preset" --rerun-failed -j1 "${CTEST_ARGS[@]}"); then
    echo "run-tests: '$preset' tests passed; FLAKY (failed once, passed alone): $names" >&2
    FLAKY_TESTS+=("${preset}: $names")
    return 0
  fi
  echo "run-tests: '$preset' tests FAILED" >&2
  FAILED_STAGES+=("$preset")
  # Named again in the summary, the last lines a CI log shows (the rerun
  # rewrote the file: these are the ones that failed twice).
  if [[ -f $failed ]]; then FAILED_TESTS+=("${preset}: $(cut -d: -f2- "$failed" | paste -sd' ')"); fi
}

# Runs the fuzz targets; findings are recorded like failing tests.
fuzz_stage() {
  export SMB_FUZZ_SECONDS=${SMB_FUZZ_SECONDS:-30}
  section "Fuzzing: tests/fuzz/run.sh (${SMB_FUZZ_SECONDS} s per target)"
  if "$ROOT/tests/fuzz/run.sh"; then
    echo "run-tests: fuzzing found nothing"
  else
    echo "run-tests: fuzzing FAILED" >&2
    FAILED_STAGES+=(fuzz)
  fi
}

summary() {
  section "Summary"
  local line
  for line in "${FLAKY_TESTS[@]}"; do echo "  FLAKY tests (failed, then passed alone), $line" >&2; done
  if ((${#FAILED_STAGES[@]} == 0)); then
    echo "all test stages passed: $*"
    return 0
  fi
  echo "FAILED stages: ${FAILED_STAGES[*]}" >&2
  for line in "${FAILED_TESTS[@]}"; do echo "  failed tests, $line" >&2; done
  return 1
}

main() {
  local quick=0 skip_deps=0
  while (($# > 0)); do
    case "$1" in
      --quick) quick=1 ;;
      --skip-deps) skip_deps=1 ;;
      -h | --help) usage; return 0 ;;
      --) shift; CTEST_ARGS=("$@"); break ;;
      *) echo "run-tests: unknown option $1 (try --help)" >&2; return 2 ;;
    esac
    shift
  done

  ((skip_deps)) || install_deps

  local -a stages=(ci)
  ((quick)) || stages+=(asan)
  local preset
  for preset in "${stages[@]}"; do
    build_preset "$preset"
    test_preset "$preset"
  done
  if ((!quick)); then
    build_preset fuzz
    fuzz_stage
    stages+=(fuzz)
  fi
  summary "${stages[@]}"
}

main "$@"
