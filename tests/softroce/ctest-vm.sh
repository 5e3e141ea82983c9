#!/usr/bin/env bash
# CTest's entry to the soft-RoCE test mode (tests/softroce/CMakeLists.txt):
# prepares the VM (prepare.sh; exit 77 = skip when qemu or the kernel package
# cannot be had), then runs suite.sh inside it against the given binaries.
#
# Usage: ctest-vm.sh SMBD SMB_BENCH [SUITE-ARGS...]
# Environment:
#   SMB_SOFTROCE_MODE=direct  run suite.sh on this machine, without the VM (it
#                             needs an RDMA device: real, or soft-RoCE enabled
#                             by the administrator)
#   SMB_SOFTROCE_TIMEOUT      seconds for the suite inside the VM (default 600)
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
(($# >= 2)) || { echo "usage: ctest-vm.sh SMBD SMB_BENCH [SUITE-ARGS...]" >&2; exit 2; }
smbd=$1 bench=$2
shift 2

if [[ ${SMB_SOFTROCE_MODE:-vm} == direct ]]; then
  exec "$HERE/suite.sh" --smbd "$smbd" --smb-bench "$bench" "$@"
fi

"$HERE/prepare.sh"
rc=$?
if ((rc == 77)); then
  echo "softroce: SKIPPED: the soft-RoCE VM cannot run on this machine (see the message above)"
  exit 77
fi
((rc == 0)) || { echo "softroce: prepare.sh failed with status $rc"; exit "$rc"; }

exec "$HERE/run-in-vm.sh" --no-prepare --timeout "${SMB_SOFTROCE_TIMEOUT:-600}" -- \
  "$HERE/suite.sh" --smbd "$smbd" --smb-bench "$bench" "$@"
