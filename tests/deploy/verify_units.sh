#!/bin/bash
# The systemd files in deploy/systemd/, checked by systemd's own tools (no
# service manager runs here): systemd-analyze verify must say nothing about
# any unit (an unknown or misspelt key is only a warning to systemd, so
# any output fails), and systemd-sysusers must create the smb user smbd's
# units run as in a scratch root. The units' /usr/bin/smbd and smbctl become
# the ones under test, since verify checks that the command exists.
# $1: the smbd binary, $2: deploy/systemd, $3: the smbctl binary.
# Exit 77: systemd is not installed.
set -euo pipefail
smbd=$1 units=$2 smbctl=$3
if ! command -v systemd-analyze >/dev/null || ! command -v systemd-sysusers >/dev/null; then
  echo "SKIP: systemd-analyze / systemd-sysusers not installed (Debian package systemd)"
  exit 77
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
status=0
for unit in smbd.service smbd@.service; do
  [[ -f $units/$unit ]] || { echo "missing: $units/$unit"; exit 1; }
  name=${unit/@./@numa0.}  # a template is verified as one of its instances
  sed "s|/usr/bin/smbd|$smbd|g" "$units/$unit" >"$scratch/$name"
  if ! out=$(cd "$scratch" && systemd-analyze verify "./$name" 2>&1) || [[ -n $out ]]; then
    echo "systemd-analyze verify $unit:"; echo "$out"; status=1
  fi
  grep -q '^Type=notify$' "$scratch/$name" || { echo "$unit: not Type=notify"; status=1; }
  grep -q '^LimitMEMLOCK=infinity$' "$scratch/$name" || { echo "$unit: no LimitMEMLOCK=infinity"; status=1; }
  grep -q '^User=smb$' "$scratch/$name" || { echo "$unit: does not run as the smb user"; status=1; }
done
mkdir -p "$scratch/root/etc"
out=$(systemd-sysusers --root="$scratch/root" "$units/smbd.sysusers" 2>&1) || { echo "$out"; status=1; }
grep -q '^smb:x:[0-9]*:[0-9]*:.*:/usr/sbin/nologin$' "$scratch/root/etc/passwd" ||
  { echo "smbd.sysusers did not create the smb user:"; cat "$scratch/root/etc/passwd"; status=1; }
# smb-repair.service: smbctl repair --watch, as a client with no privileges.
sed "s|/usr/bin/smbctl|$smbctl|g" "$units/smb-repair.service" >"$scratch/smb-repair.service"
if ! out=$(cd "$scratch" && systemd-analyze verify ./smb-repair.service 2>&1) || [[ -n $out ]]; then
  echo "systemd-analyze verify smb-repair.service:"; echo "$out"; status=1
fi
grep -q '^ExecStart=.* repair --watch ' "$scratch/smb-repair.service" || { echo "smb-repair.service: not repair --watch"; status=1; }
grep -q '^DynamicUser=yes$' "$scratch/smb-repair.service" || { echo "smb-repair.service: not DynamicUser"; status=1; }
# The command the unit runs takes its flags as written (a typo fails here).
# $SMB_REPAIR_ARGS (repair.env) as systemd expands it: split into words,
# none where unset; its documented example must parse too.
command=$(sed -n 's|^ExecStart=||p' "$scratch/smb-repair.service")
for args in "" "--onto 127.0.0.1:2,127.0.0.1:3 --replace-after 120"; do
  out=$(SMB_SERVERS=127.0.0.1:1 timeout 5 ${command//\$SMB_REPAIR_ARGS/$args} 2>&1) &&
    { echo "smb-repair's command ran on?"; status=1; }
  [[ $out == *127.0.0.1:1* ]] || { echo "smb-repair's command (SMB_REPAIR_ARGS='$args'): $out"; status=1; }
done
[[ $status == 0 ]] && echo "deploy/systemd: every unit verifies clean; the smb user is created"
exit $status
