#!/usr/bin/env bash
# CTest `demo`: ./run-demo.sh as a newcomer runs it, against this build tree
# and without installing or building anything (ctest tests the tree it is
# given). Fails when the demo fails or its training prints no accuracy;
# exit 77 (a skip) when the demo skipped training for a missing package.
#
# Usage: demo_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
source_dir=$1 build_dir=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT

SMB_DEMO_BUILD_DIR=$build_dir "$source_dir/run-demo.sh" --skip-deps --skip-build 2>&1 | tee "$out"
status=${PIPESTATUS[0]}
if ((status != 0)); then
  echo "demo_test: FAILED: run-demo.sh exited with status $status" >&2
  exit 1
fi
if grep -q 'training skipped' "$out"; then
  echo "demo_test: SKIP: the demo skipped its training part (see above)"
  exit 77
fi
if ! grep -q 'final test accuracy [0-9]' "$out"; then
  echo "demo_test: FAILED: the demo printed no final test accuracy" >&2
  exit 1
fi
echo "demo_test: OK"
