#!/usr/bin/env bash
# The repair-cycles test as a soak: servers SIGKILLed, restarted and
# repaired again and again under three worker processes doing fetch-adds
# and accumulates, every acknowledged op checked at the end (docs/reliability.md,
# "A series of losses"; CI runs 10 cycles: tests/integration/repair_cycles_test.cpp).
#
# Usage: tools/bench/repair_soak.sh [--build DIR] [--cycles N] [--fabric ucx_shm|ucx_tcp|verbs]
#   --build   the build tree (default build/ci)
#   --cycles  losses (default 100: each server about 33 times)
#   --fabric  which fabric (default: ucx_tcp; verbs needs an RDMA device, see tests/softroce/)
# It prints "N servers killed and repaired (FABRIC): A ops acknowledged, U uncertain, L lost".
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$ROOT/build/ci cycles=100 fabric=ucx_tcp
while (($# > 0)); do
  case "$1" in
    --build) build=$2; shift ;;
    --cycles) cycles=$2; shift ;;
    --fabric) fabric=$2; shift ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "repair_soak: unknown option $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
binary=$build/tests/smb_reliability_tests
[[ -x $binary ]] || { echo "repair_soak: no $binary (cmake --build --preset ci)" >&2; exit 1; }
SMB_REPAIR_CYCLES=$cycles "$binary" --gtest_filter="*NoAcknowledgedOpIsLost*/${fabric}_*" 2>&1 |
  grep -E "servers killed|Failure|went back|missing|OK \]|FAILED  \]|Skipped"
