# shellcheck shell=bash
# Shared by prepare.sh and run-in-vm.sh (sourced, not run).
#
# Where the soft-RoCE VM's kernel and initramfs are cached:
#   $SMB_SOFTROCE_CACHE if set, else /var/cache/smb-softroce when running as
#   root, else ${XDG_CACHE_HOME:-~/.cache}/smb-softroce.
# The cache is shared by every checkout on the machine; prepare.sh takes a lock
# on it, so concurrent runs are safe.

# Exit status meaning "cannot run here, skip" (CTest SKIP_RETURN_CODE).
# shellcheck disable=SC2034  # used by the scripts that source this file
SOFTROCE_SKIP=77

softroce_cache_dir() {
  if [[ -n ${SMB_SOFTROCE_CACHE:-} ]]; then
    printf '%s\n' "$SMB_SOFTROCE_CACHE"
  elif [[ $(id -u) -eq 0 ]]; then
    printf '%s\n' /var/cache/smb-softroce
  else
    printf '%s\n' "${XDG_CACHE_HOME:-$HOME/.cache}/smb-softroce"
  fi
}

softroce_log() { printf 'softroce: %s\n' "$*" >&2; }
