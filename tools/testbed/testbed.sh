#!/usr/bin/env bash
# Many hosts on one machine: N network namespaces ("hosts") joined by a
# bridge, each behind a veth link shaped by tc tbf, so that the fabric's
# bytes cross a network the way they would between machines.
#
#   testbed.sh [--name NAME] up --hosts N [--link RATE] [--link-for HOST=RATE]...
#                              [--sites K --between RATE --rtt MS]
#                                                         e.g. --link 1gbit (default), none: unshaped;
#                                                         --link-for h9=none: one host's own rate;
#                                                         --sites 2: hosts split into 2 sites in order
#                                                         (6 hosts: h1-h3, h4-h6), each site its own
#                                                         bridge, sites joined in a chain by links of
#                                                         --between RATE (default 100mbit) and --rtt
#                                                         (default 50 ms: half each way; delay_link.cpp)
#   testbed.sh [--name NAME] exec HOST CMD...               HOST: h3 or 3
#   testbed.sh [--name NAME] addr HOST                      prints the host's address
#   testbed.sh [--name NAME] down                           removes everything NAME made
#
# Host i is namespace NAME-hI with eth0 at 198.18.0.I/15 (the benchmarking
# range) and lo up; the bridge lives in its own namespace NAME-sw, so the
# machine's own network is never touched. Both directions are shaped: tbf on
# the host's eth0 (what it sends) and on the bridge's port (what it receives).
#
# Shared memory would bypass the links: namespaces share the IPC namespace
# and /dev/shm, and UCX takes shared memory between processes whose machine
# identity matches, which is the kernel's boot id
# (/proc/sys/kernel/random/boot_id). `exec` therefore runs each command in
# its own mount and UTS namespaces, with the host's own boot id bound over the
# kernel's (made at `up`) and the host's name (NAME-hI) as hostname: processes
# on different hosts look like different machines to UCX and talk TCP over
# the links, while processes on one host still share memory, as on a real
# machine. smb-bench's path line shows it ("am: tcp").
#
# Needs root, iproute2 (ip, tc) and util-linux (unshare). Exit status 77
# (skip) when they are missing.
set -u -o pipefail

NAME=${SMB_TESTBED_NAME:-smbtb}
STATE_DIR=/run/smb-testbed

die() { echo "testbed: $*" >&2; exit 1; }
skip() { echo "testbed: cannot run here: $*" >&2; exit 77; }

need_tools() {
  ((EUID == 0)) || skip "needs root (network namespaces, tc)"
  local t
  for t in ip tc unshare; do command -v "$t" >/dev/null || skip "needs '$t' (apt-get install iproute2 util-linux)"; done
}

host_ns() {
  local h=${1#h}
  [[ $h =~ ^[0-9]+$ ]] || die "not a host: $1 (h1, h2, ... or 1, 2, ...)"
  echo "$NAME-h$h"
}

host_addr() { echo "198.18.0.${1#h}"; }

# The site (0-based) of host I of N split into K sites in order.
site_of() { echo $(( ($1 - 1) * $3 / $2 )); }

# RATE ("1gbit", "100mbit", "500kbit") -> bits per second.
bits_of() {
  local rate=$1
  case $rate in
    *gbit) echo $(( ${rate%gbit} * 1000000000 )) ;;
    *mbit) echo $(( ${rate%mbit} * 1000000 )) ;;
    *kbit) echo $(( ${rate%kbit} * 1000 )) ;;
    *) die "a rate such as 1gbit, 100mbit or 500kbit (got '$rate')" ;;
  esac
}

# The line between sites, compiled once per change of its source.
build_delay_link() {
  local src
  src="$(dirname "${BASH_SOURCE[0]}")/delay_link.cpp"
  mkdir -p "$STATE_DIR"
  [[ $STATE_DIR/delay_link -nt $src ]] && return 0
  # Into a file of its own, then renamed: two testbeds may come up at once.
  c++ -std=c++20 -O2 -o "$STATE_DIR/delay_link.$$" "$src" || die "cannot compile $src (needs g++)"
  mv -f "$STATE_DIR/delay_link.$$" "$STATE_DIR/delay_link"
}

# RATE -> a tbf burst of ~10 ms of it, at least 64 KiB.
burst_for() {
  local bits
  bits=$(bits_of "$1") || exit 1
  local burst=$(( bits / 8 / 100 ))
  ((burst < 65536)) && burst=65536
  echo "$burst"
}

shape() {  # NS DEV RATE
  [[ $3 == none ]] && return 0
  tc -n "$1" qdisc add dev "$2" root tbf rate "$3" burst "$(burst_for "$3")" latency 50ms
}

cmd_down() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$NAME-(h[0-9]+|sw)$"); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  rm -f "$STATE_DIR/$NAME" "$STATE_DIR/$NAME"-h*.boot_id "$STATE_DIR/$NAME"-line*.log
  return 0
}

cmd_up() {
  local hosts=0 link=1gbit sites=1 between=100mbit rtt=50
  local -A link_for=()
  while (($#)); do
    case $1 in
      --hosts) hosts=$2; shift ;;
      --link) link=$2; shift ;;
      --sites) sites=$2; shift ;;
      --between) between=$2; bits_of "$between" >/dev/null; shift ;;
      --rtt) rtt=${2%ms}; shift ;;
      --link-for)
        [[ $2 =~ ^h?([0-9]+)=(.+)$ ]] || die "up: --link-for HOST=RATE (h3=10gbit, h3=none)"
        link_for[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
        [[ ${BASH_REMATCH[2]} == none ]] || burst_for "${BASH_REMATCH[2]}" >/dev/null
        shift
        ;;
      *) die "up: unknown option $1" ;;
    esac
    shift
  done
  [[ $hosts =~ ^[0-9]+$ ]] && ((hosts >= 1 && hosts <= 250)) || die "up: --hosts 1..250"
  [[ $sites =~ ^[0-9]+$ ]] && ((sites >= 1 && sites <= hosts && sites <= 16)) || die "up: --sites 1..16, at most --hosts"
  [[ $rtt =~ ^[0-9]+$ ]] && ((rtt <= 10000)) || die "up: --rtt: milliseconds, 0..10000 (got '$rtt')"
  [[ $link == none ]] || burst_for "$link" >/dev/null
  need_tools
  cmd_down
  trap 'echo "testbed: up failed; removing what it made" >&2; cmd_down' ERR
  set -e
  local sw=$NAME-sw i ns rate
  ip netns add "$sw" || skip "cannot create network namespaces"
  local s
  for ((s = 0; s < sites; s++)); do
    ip -n "$sw" link add "br$s" type bridge
    ip -n "$sw" link set "br$s" up
  done
  # Site s-1 and site s meet over a line of delay_link.cpp between two TAP
  # devices (this kernel has no netem): half the round trip each way, at
  # --between's rate.
  ((sites == 1)) || build_delay_link
  for ((s = 1; s < sites; s++)); do
    local left="x$((s - 1))r" right="x${s}l"
    ip -n "$sw" tuntap add dev "$left" mode tap
    ip -n "$sw" tuntap add dev "$right" mode tap
    ip -n "$sw" link set "$left" master "br$((s - 1))" up
    ip -n "$sw" link set "$right" master "br$s" up
    ip netns exec "$sw" "$STATE_DIR/delay_link" "$left" "$right" "$((rtt * 500))" "$(bits_of "$between")" \
      >"$STATE_DIR/$NAME-line$s.log" 2>&1 &
  done
  for ((i = 1; i <= hosts; i++)); do
    ns=$(host_ns "$i")
    ip netns add "$ns"
    ip -n "$sw" link add "p$i" type veth peer name eth0 netns "$ns"
    ip -n "$sw" link set "p$i" master "br$(site_of "$i" "$hosts" "$sites")" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$(host_addr "$i")/15" dev eth0
    ip -n "$ns" link set eth0 up
    rate=${link_for[$i]:-$link}
    shape "$ns" eth0 "$rate"
    shape "$sw" "p$i" "$rate"
    mkdir -p "$STATE_DIR"
    cat /proc/sys/kernel/random/uuid >"$STATE_DIR/$ns.boot_id"
  done
  set +e
  trap - ERR
  mkdir -p "$STATE_DIR"
  echo "hosts=$hosts link=$link sites=$sites between=$between rtt=${rtt}ms" >"$STATE_DIR/$NAME"
  for ((i = 1; i <= hosts; i++)); do
    echo "h$i $(host_addr "$i") (namespace $(host_ns "$i"), link ${link_for[$i]:-$link}, site $(($(site_of "$i" "$hosts" "$sites") + 1)))"
  done
  ((sites == 1)) || echo "sites joined by $between, round trip ${rtt} ms"
}

cmd_exec() {
  (($# >= 2)) || die "exec HOST CMD..."
  local ns
  ns=$(host_ns "$1")
  shift
  ip netns list | awk '{print $1}' | grep -qx "$ns" || die "no host $ns (run 'up' first)"
  # exec all the way down: the caller's $! is the command's own pid.
  exec ip netns exec "$ns" unshare --uts --mount sh -c \
    'hostname "$0" && mount --bind "$1" /proc/sys/kernel/random/boot_id && shift && exec "$@"' \
    "$ns" "$STATE_DIR/$ns.boot_id" "$@"
}

while [[ ${1:-} == --name ]]; do NAME=$2; shift 2; done
[[ $NAME =~ ^[A-Za-z0-9_-]{1,20}$ ]] || die "--name: 1-20 letters, digits, - or _"
case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) need_tools; cmd_down ;;
  exec) shift; cmd_exec "$@" ;;
  addr) host_addr "${2:?addr HOST}" ;;
  *) sed -n '2,32p' "$0" >&2; exit 2 ;;
esac
