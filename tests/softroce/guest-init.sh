#!/bin/busybox sh
# shellcheck shell=dash disable=SC2013,SC3045
# /init of the soft-RoCE test VM's initramfs (prepare.sh copies it there).
#
# Loads the modules listed in /etc/smb-vm/modules (in order), mounts the
# host's root read-only over 9p (tag "host") and a writable run folder
# (tag "out"), makes the host root usable as a chroot (a tmpfs overlay over
# it, /proc, /sys, /dev, tmpfs on /run and /dev/shm), brings up eth0 as
# 10.0.2.15/24 with soft-RoCE device rxe0 on it, then runs /run/smb-vm/cmd
# from the run folder inside the chroot. The command's output goes to out/output, its exit
# status to out/rc, the guest's kernel log to out/dmesg; then the VM powers off.
#
# Kernel command line: smb.timeout=SECONDS (guest-side limit on the command).
# Status lines start with "smb-vm:" and go to the serial console.

/bin/busybox --install -s /bin
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec </dev/null >/dev/console 2>&1

log() { echo "smb-vm: $*"; }
OUT_MOUNTED=0
finish() {
  # $1: status to report
  if [ "$OUT_MOUNTED" = 1 ]; then
    dmesg >/mnt/out/dmesg 2>&1
    echo "$1" >/mnt/out/rc
    sync
  fi
  log "exit status $1, powering off"
  poweroff -f
  sleep 10
}
die() {
  log "SETUP FAILED: $*"
  dmesg | tail -n 30
  finish 125
}

timeout_s=600
for word in $(cat /proc/cmdline); do
  case "$word" in
    smb.timeout=*) timeout_s=${word#smb.timeout=} ;;
  esac
done

modules=/lib/modules/$(uname -r)
while read -r ko; do
  [ -n "$ko" ] || continue
  insmod "$modules/$ko" || die "insmod $ko"
done </etc/smb-vm/modules

mkdir -p /mnt/host /mnt/out
p9opts=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o "$p9opts,ro,cache=loose" host /mnt/host || die "mounting the host root over 9p"
mount -t 9p -o "$p9opts" out /mnt/out || die "mounting the run folder over 9p"
OUT_MOUNTED=1

# The guest's root: the host root with a tmpfs overlay, so that it looks
# writable (writes stay in guest memory and vanish at power-off) and the
# host's files, /tmp included, are all visible. Without overlayfs: the host
# root read-only, with empty tmpfs on /tmp and /var/tmp.
mkdir -p /ovl /mnt/root
mount -t tmpfs -o mode=755 tmpfs /ovl
mkdir -p /ovl/upper /ovl/work
if mount -t overlay overlay -o lowerdir=/mnt/host,upperdir=/ovl/upper,workdir=/ovl/work /mnt/root; then
  R=/mnt/root
else
  log "overlayfs failed; host root read-only, empty tmpfs on /tmp and /var/tmp"
  R=/mnt/host
  for d in /tmp /var/tmp; do
    mount -t tmpfs -o mode=1777 tmpfs "$R$d" || die "tmpfs on $d"
  done
fi
mount -o bind /proc "$R/proc" || die "bind /proc"
mount -o bind /sys "$R/sys" || die "bind /sys"
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -o rbind /dev "$R/dev" || die "bind /dev"
mount -t tmpfs -o mode=755 tmpfs "$R/run" || die "tmpfs on /run"
mkdir -p "$R/run/smb-vm"
mount -o bind /mnt/out "$R/run/smb-vm" || die "bind the run folder"

# Network: only the VM's own addresses (the NIC's user-mode backend runs with
# restrict=on, so nothing leaves this machine). No default route.
hostname smb-vm
ip link set lo up
ip link set eth0 up || die "no eth0 (virtio_net)"
ip addr add 10.0.2.15/24 dev eth0
chroot "$R" rdma link add rxe0 type rxe netdev eth0 || die "rdma link add rxe0 type rxe netdev eth0"

ulimit -l unlimited
started=$(cut -d. -f1 /proc/uptime)
log "ready ($(cut -d' ' -f1 /proc/uptime)s after boot); running the command (limit ${timeout_s}s)"
timeout -s KILL "$timeout_s" chroot "$R" /usr/bin/env -i \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/tmp TERM=dumb LANG=C.UTF-8 SMB_SOFTROCE_VM=1 SMB_VM_OUT=/run/smb-vm \
  /bin/sh /run/smb-vm/cmd >/mnt/out/output 2>&1 </dev/null
rc=$?
# busybox timeout: a killed command shows as 128+9; report it as timeout(1) would.
if [ "$rc" = 137 ] && [ $(($(cut -d. -f1 /proc/uptime) - started)) -ge "$timeout_s" ]; then
  log "the command ran past ${timeout_s}s and was killed"
  rc=124
fi
log "command done at $(cut -d' ' -f1 /proc/uptime)s"
finish "$rc"
