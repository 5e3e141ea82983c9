#!/usr/bin/env bash
# Runs one command inside a small qemu VM with soft-RoCE (rdma_rxe) on its
# virtio NIC, and exits with the command's exit status.
#
# The guest runs Debian's own kernel (prepared by prepare.sh, which this runs
# first) under TCG, with the HOST's root file system as its userspace,
# read-only over 9p: the command sees the host's binaries, libraries and build
# trees at the same paths, and starts in the current directory. Writable in
# the guest: /tmp, /var/tmp, /run, /dev/shm (tmpfs, gone afterwards) and
# $SMB_VM_OUT (= /run/smb-vm, the host's run folder). Networking: eth0 is
# 10.0.2.15/24 with RDMA device rxe0 on it; the NIC's user-mode backend runs
# with restrict=on, so no packet leaves this machine. The command runs as
# root with `ulimit -l unlimited` and SMB_SOFTROCE_VM=1 in its environment
# (plus what --env adds; nothing else is inherited).
#
# Usage: tests/softroce/run-in-vm.sh [OPTIONS] [--] CMD [ARGS...]
#   --timeout SECONDS  limit for CMD inside the guest (default 600); qemu
#                      itself gets this plus 120 s for boot and shutdown, and
#                      is killed after that: a stuck guest fails, it never hangs
#   --vm-timeout SECONDS  the hard limit for qemu itself (default: --timeout + 120)
#   --env NAME=VALUE   put NAME=VALUE in CMD's environment (repeatable)
#   --memory SIZE      guest memory (default 2G)
#   --cpus N           guest CPUs (default 2)
#   --keep             keep the run folder (output, dmesg, serial console log)
#   --console          stream the serial console (boot log) too
#   --no-prepare       do not run prepare.sh (use what it cached before)
#
# Exit status: CMD's; 124 if it timed out (in the guest or on the host);
# 125 if the VM failed to set up or did not report; 77 if the VM cannot run
# here at all (no qemu / kernel package): see prepare.sh.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }

timeout_s=600 vm_timeout_s="" memory=2G cpus=2 keep=0 console=0 prepare=1
envs=()
while (($# > 0)); do
  case "$1" in
    --timeout) timeout_s=$2; shift ;;
    --vm-timeout) vm_timeout_s=$2; shift ;;
    --env) [[ $2 == *=* ]] || { echo "run-in-vm: --env takes NAME=VALUE" >&2; exit 2; }; envs+=("$2"); shift ;;
    --memory) memory=$2; shift ;;
    --cpus) cpus=$2; shift ;;
    --keep) keep=1 ;;
    --console) console=1 ;;
    --no-prepare) prepare=0 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    -*) echo "run-in-vm: unknown option $1 (try --help)" >&2; exit 2 ;;
    *) break ;;
  esac
  shift
done
(($# > 0)) || { usage >&2; exit 2; }
[[ $timeout_s =~ ^[0-9]+$ ]] || { echo "run-in-vm: --timeout takes whole seconds" >&2; exit 2; }
[[ -n $vm_timeout_s ]] || vm_timeout_s=$((timeout_s + 120))
[[ $vm_timeout_s =~ ^[0-9]+$ ]] || { echo "run-in-vm: --vm-timeout takes whole seconds" >&2; exit 2; }

if ((prepare)); then
  "$HERE/prepare.sh" --quiet || exit $?
fi
CACHE=$(softroce_cache_dir)
[[ -f $CACHE/current.env ]] || { softroce_log "SKIP: nothing prepared in $CACHE (run tests/softroce/prepare.sh)"; exit "$SOFTROCE_SKIP"; }
# shellcheck disable=SC1091
source "$CACHE/current.env"
command -v qemu-system-x86_64 >/dev/null || { softroce_log "SKIP: no qemu-system-x86_64"; exit "$SOFTROCE_SKIP"; }

run=$(mktemp -d "${TMPDIR:-/tmp}/smb-softroce.XXXXXX")
chmod 755 "$run"
qemu_pid=""
tail_pid=""
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  [[ -n $qemu_pid ]] && kill "$qemu_pid" 2>/dev/null
  [[ -n $tail_pid ]] && kill "$tail_pid" 2>/dev/null
  if ((keep)); then
    softroce_log "run folder kept: $run"
  else
    rm -rf "$run"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The guest's command: a POSIX shell script in the run folder.
{
  echo "cd $(printf '%q' "$PWD") || exit 125"
  for e in "${envs[@]}"; do echo "export $(printf '%q' "$e")"; done
  printf 'exec'
  printf ' %q' "$@"
  printf '\n'
} >"$run/cmd"
: >"$run/output"

# The host root: read-only, every host mount below it visible (multidevs=remap
# keeps inode numbers from different file systems apart).
# shellcheck disable=SC2054  # the commas are qemu's
qemu_args=(
  -accel tcg -cpu max -m "$memory" -smp "$cpus"
  -nographic -no-reboot
  -kernel "$VMLINUZ" -initrd "$INITRAMFS"
  -append "console=ttyS0 quiet panic=-1 smb.timeout=$timeout_s"
  -fsdev "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap"
  -device virtio-9p-pci,fsdev=hostroot,mount_tag=host
  -fsdev "local,id=runfolder,path=$run,security_model=none"
  -device virtio-9p-pci,fsdev=runfolder,mount_tag=out
  -netdev user,id=net0,restrict=on
  -device virtio-net-pci,netdev=net0,romfile=
)

started=$(date +%s)
softroce_log "booting the VM (kernel $KERNEL_VERSION, TCG, ${cpus} CPUs, $memory): $*"
timeout -k 10 "$vm_timeout_s" qemu-system-x86_64 "${qemu_args[@]}" </dev/null >"$run/console.log" 2>&1 &
qemu_pid=$!
if ((console)); then
  tail -n +1 -F --pid="$qemu_pid" "$run/console.log" "$run/output" 2>/dev/null &
else
  tail -n +1 -F --pid="$qemu_pid" "$run/output" 2>/dev/null &
fi
tail_pid=$!
set +e
wait "$qemu_pid"
qemu_rc=$?
set -e
qemu_pid=""
wait "$tail_pid" 2>/dev/null
tail_pid=""
elapsed=$(($(date +%s) - started))

if [[ -s $run/rc ]]; then
  rc=$(<"$run/rc")
  softroce_log "VM finished in ${elapsed}s; command exit status $rc"
  if [[ $rc == 125 ]]; then
    softroce_log "last lines of the serial console:"
    tail -n 40 "$run/console.log" >&2
  elif [[ $rc != 0 ]]; then
    grep -a -o 'smb-vm:.*' "$run/console.log" | tr -d '\r' >&2 || true
  fi
  exit "$rc"
fi

if ((qemu_rc == 124 || qemu_rc == 137)); then
  softroce_log "FAILED: the VM did not finish within ${vm_timeout_s}s and was killed"
  rc=124
else
  softroce_log "FAILED: the VM stopped (qemu exit status $qemu_rc) without reporting the command's exit status"
  rc=125
fi
softroce_log "last lines of the serial console:"
tail -n 40 "$run/console.log" >&2
exit "$rc"
