#!/usr/bin/env bash
# Prepares everything the soft-RoCE test VM needs; idempotent and quick when
# done before (about a second: no apt, no download, no rebuild).
#
#   1. Debian packages: qemu-system-x86 busybox-static cpio kmod and the
#      verbs/UCX userspace the guest borrows from the host (apt only when
#      something is missing; needs root or sudo then).
#   2. The kernel that `apt-cache depends linux-image-amd64` names: its .deb is
#      fetched with `apt-get download`, unpacked with `dpkg -x` into the cache
#      and indexed with depmod. A cached kernel is reused; when apt names a
#      newer one that cannot be fetched, the newest cached one is used.
#   3. A small initramfs: busybox, the modules for virtio, 9p, overlay, veth
#      and soft-RoCE (rdma_rxe, rdma_ucm), and tc's prio qdisc, u32 filter
#      and drop action (the suite's failures case blocks UDP 4791 with
#      them), with their dependencies, and
#      guest-init.sh as /init. Rebuilt only when its inputs change.
#
# The result is recorded in CACHE/current.env (KERNEL_VERSION, VMLINUZ,
# INITRAMFS), which run-in-vm.sh reads. The cache folder is described in
# common.sh (override with SMB_SOFTROCE_CACHE).
#
# Usage: tests/softroce/prepare.sh [--quiet]
# Exit status: 0 ready; 77 cannot be prepared on this machine (no qemu, no
# kernel package): callers treat it as "skip"; anything else is an error.
set -euo pipefail

export PATH="$PATH:/usr/sbin:/sbin"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"

QUIET=0
[[ ${1:-} == --quiet ]] && QUIET=1
info() { ((QUIET)) || softroce_log "$@"; }
skip() { softroce_log "SKIP: $*"; exit "$SOFTROCE_SKIP"; }

# Needed to build and boot the VM: without them the test mode is skipped.
VM_PACKAGES=(qemu-system-x86 busybox-static cpio kmod)
# The userspace the guest runs (from the host's root, read-only).
GUEST_PACKAGES=(rdma-core ibverbs-utils ibverbs-providers perftest libibverbs-dev librdmacm-dev ucx-utils iproute2)
# Loaded in the guest, with their dependencies, in this order. crc32_generic
# first: without it rdma_rxe fails with "failed to init crc32 algorithm err:-2".
MODULES=(crc32_generic virtio_pci 9pnet_virtio 9p overlay virtio_net veth rdma_rxe ib_uverbs rdma_ucm sch_prio cls_u32 act_gact)

as_root() {
  if [[ $(id -u) -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo -n "$@"
  else
    return 1
  fi
}

missing_packages() {
  local pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || printf '%s\n' "$pkg"
  done
}

apt_install() {
  local -a opts=(-y -q --no-install-recommends -o DPkg::Lock::Timeout=300)
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install "${opts[@]}" "$@" >&2 && return 0
  info "apt-get install failed; updating the package lists and trying again"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q -o DPkg::Lock::Timeout=300 >&2 || true
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install "${opts[@]}" "$@" >&2
}

install_packages() {
  local -a missing
  mapfile -t missing < <(missing_packages "${VM_PACKAGES[@]}" "${GUEST_PACKAGES[@]}")
  ((${#missing[@]} == 0)) && return 0
  info "installing: ${missing[*]}"
  if ! apt_install "${missing[@]}"; then
    softroce_log "could not install ${missing[*]} (need root or passwordless sudo, and Debian's apt archive)"
  fi
  mapfile -t missing < <(missing_packages "${VM_PACKAGES[@]}")
  ((${#missing[@]} == 0)) || skip "missing ${missing[*]}: install them (apt-get install ${missing[*]}) to run the soft-RoCE VM tests"
  mapfile -t missing < <(missing_packages "${GUEST_PACKAGES[@]}")
  ((${#missing[@]} == 0)) || softroce_log "warning: missing ${missing[*]}; guest tests that need them will fail"
}

# The kernel package linux-image-amd64 currently depends on, e.g. linux-image-6.1.0-56-amd64.
wanted_kernel_package() {
  LC_ALL=C apt-cache depends linux-image-amd64 2>/dev/null |
    awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }'
}

# Prints the version (e.g. 6.1.0-56-amd64) of a usable unpacked kernel in the cache.
usable_kernel() {
  local dir=$CACHE/kernel/$1
  [[ -f $dir/.complete && -f $dir/boot/vmlinuz-$1 && -f $dir/lib/modules/$1/modules.dep ]]
}

newest_cached_kernel() {
  local d best=""
  for d in "$CACHE"/kernel/*/; do
    d=$(basename "$d")
    usable_kernel "$d" && best=$d
  done
  [[ -n $best ]] && printf '%s\n' "$best"
}

# Downloads and unpacks kernel package $1 into the cache; prints its version.
download_kernel() {
  local pkg=$1 version=${1#linux-image-} tmp deb
  info "fetching $pkg (about 70 MB) into $CACHE/kernel/$version"
  tmp=$(mktemp -d "$CACHE/download.XXXXXX")
  # apt drops privileges to _apt for downloads; a folder it may write to avoids a warning.
  chmod 755 "$tmp"
  chown _apt "$tmp" 2>/dev/null || true
  if ! (cd "$tmp" && apt-get download -q "$pkg" >&2); then
    rm -rf "$tmp"
    softroce_log "apt-get download $pkg failed"
    return 1
  fi
  deb=$(ls "$tmp"/*.deb)
  rm -rf "$CACHE/kernel/$version"
  mkdir -p "$CACHE/kernel/$version"
  dpkg -x "$deb" "$CACHE/kernel/$version"
  depmod -b "$CACHE/kernel/$version" "$version"
  touch "$CACHE/kernel/$version/.complete"
  rm -rf "$tmp"
  printf '%s\n' "$version"
}

fetch_kernel() {
  local pkg version attempt
  for attempt in 1 2; do
    pkg=$(wanted_kernel_package || true)
    if [[ -n $pkg ]]; then
      version=${pkg#linux-image-}
      if usable_kernel "$version"; then
        printf '%s\n' "$version"
        return 0
      fi
      download_kernel "$pkg" && return 0
    fi
    # Missing or stale package lists (the archive may have moved on to a new
    # kernel): update them once and ask again.
    ((attempt == 1)) || break
    info "updating the package lists (apt-get update)"
    as_root apt-get update -q -o DPkg::Lock::Timeout=300 >&2 || true
  done
  if version=$(newest_cached_kernel); then
    softroce_log "warning: using the cached kernel $version"
    printf '%s\n' "$version"
    return 0
  fi
  return 1
}

# Builds (or reuses) the initramfs for kernel $1; prints its path.
build_initramfs() {
  local version=$1 kroot=$CACHE/kernel/$1 list key image stage ko
  # The modules to load, dependencies first, each once.
  list=$(modprobe -d "$kroot" -S "$version" --show-depends -a "${MODULES[@]}" |
    awk '$1 == "insmod" && !seen[$2]++ { print $2 }')
  [[ -n $list ]] || { softroce_log "modprobe --show-depends found none of: ${MODULES[*]}"; return 1; }
  key=$({
    printf '%s\n' "$version" "$list"
    cat "$HERE/guest-init.sh" /bin/busybox
  } | sha256sum | cut -c1-16)
  image=$CACHE/initramfs-$version-$key.cpio.gz
  if [[ -f $image ]]; then
    printf '%s\n' "$image"
    return 0
  fi
  info "building the initramfs for $version"
  stage=$(mktemp -d "$CACHE/stage.XXXXXX")
  mkdir -p "$stage"/{bin,sbin,dev,proc,sys,tmp,mnt/host,mnt/out,etc/smb-vm,lib/modules/"$version"}
  cp /bin/busybox "$stage/bin/busybox"
  ln -s busybox "$stage/bin/sh"
  install -m 755 "$HERE/guest-init.sh" "$stage/init"
  : >"$stage/etc/smb-vm/modules"
  while read -r ko; do
    ko=${ko#"$kroot/lib/modules/$version/"}
    mkdir -p "$stage/lib/modules/$version/$(dirname "$ko")"
    cp "$kroot/lib/modules/$version/$ko" "$stage/lib/modules/$version/$ko"
    printf '%s\n' "$ko" >>"$stage/etc/smb-vm/modules"
  done <<<"$list"
  cp "$kroot/lib/modules/$version"/modules.{order,builtin,builtin.modinfo} "$stage/lib/modules/$version/"
  depmod -b "$stage" "$version"  # modules.dep, for busybox modprobe when debugging
  (cd "$stage" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) | gzip -9 >"$image.tmp"
  mv "$image.tmp" "$image"
  rm -rf "$stage"
  # Older images of this kernel are stale now.
  find "$CACHE" -maxdepth 1 -name "initramfs-*.cpio.gz" ! -name "$(basename "$image")" -mmin +60 -delete 2>/dev/null || true
  printf '%s\n' "$image"
}

main() {
  CACHE=$(softroce_cache_dir)
  install_packages
  mkdir -p "$CACHE" || skip "cannot create the cache folder $CACHE (set SMB_SOFTROCE_CACHE)"
  exec 9>"$CACHE/.lock"
  flock 9
  local version image
  version=$(fetch_kernel) || skip "no Debian kernel package (apt-get download of linux-image-amd64's kernel failed and none is cached in $CACHE)"
  image=$(build_initramfs "$version")
  {
    printf 'KERNEL_VERSION=%q\n' "$version"
    printf 'VMLINUZ=%q\n' "$CACHE/kernel/$version/boot/vmlinuz-$version"
    printf 'INITRAMFS=%q\n' "$image"
  } >"$CACHE/current.env.tmp"
  mv "$CACHE/current.env.tmp" "$CACHE/current.env"
  info "ready: kernel $version, $(basename "$image") ($(du -k "$image" | cut -f1) KiB) in $CACHE"
}

main "$@"
