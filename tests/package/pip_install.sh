#!/usr/bin/env bash
# pip install of the smb package (pyproject.toml, setup.py), as a user does:
#   python3 -m pip install --no-build-isolation .
# offline (--no-index), into a clean virtual environment that sees Debian's
# packages (--system-site-packages: numpy, torch). The module is taken from
# the build tree BUILD (SMB_BUILD_DIR; setup.py can configure one itself,
# which takes longer). Then, from elsewhere, the environment's smb imports
# from the environment with its own libsmb, its smbrun (the console script)
# runs a job against a real smbd, and the job moves and checks real bytes.
#
#   tests/package/pip_install.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$(realpath "$1")
build=$(realpath "$2")
fail() { echo "pip_install: $*" >&2; exit 1; }

scratch=$(mktemp -d /tmp/smb-pip.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
# A copy of the sources (4 MB): pip builds in the tree it is given, and
# leaves its egg-info and build/ there.
mkdir "$scratch/src"
(cd "$source_dir" && git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' file; do [[ -e $file ]] && printf '%s\0' "$file"; done |
  xargs -0 cp --parents -t "$scratch/src")

/usr/bin/python3 -m venv --system-site-packages "$scratch/venv" || fail "python3 -m venv (Debian: python3-venv)"
venv=$scratch/venv
SMB_BUILD_DIR=$build "$venv/bin/python" -m pip install --no-build-isolation --no-index --no-cache-dir \
  "$scratch/src" >"$scratch/pip.log" 2>&1 || { cat "$scratch/pip.log"; fail "pip install"; }

cd "$scratch"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$venv/bin/python" - "$site" <<'PY' || fail "the installed package"
import sys
site = sys.argv[1]
import smb, smb.torch, smb.run, smb.collective
for module in (smb, smb.torch, smb.run, smb.collective):
    assert module.__file__.startswith(site), f"{module.__name__} from {module.__file__}, not {site}"
libs = [line.split()[-1] for line in open("/proc/self/maps") if "libsmb" in line]
assert libs and all(path.startswith(site) for path in libs), f"libsmb loaded from {sorted(set(libs))}"
print("pip_install: smb", smb.__version__, "from", smb.__file__)
PY
[[ -x $venv/bin/smbrun ]] || fail "no smbrun console script in the environment"
cat >"$scratch/job.py" <<'PY'
import os, numpy as np, smb
rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
client = smb.Client()
name = os.environ["SMB_JOB_ID"] + "-pip"
# Each rank adds its rank + 1 to a shared buffer; every rank checks the sum.
if rank == 0:
    buffer = client.create(name, 8 * 1024)
    buffer.write(0, np.zeros(1024))
client.barrier(name + "-made", size)
if rank != 0:
    buffer = client.open(name)
buffer.apply("accumulate", x=np.full(1024, rank + 1.0))
client.barrier(name + "-added", size)
out = np.empty(1024)
buffer.read(0, out)
expected = size * (size + 1) / 2
assert (out == expected).all(), (out[:4], expected)
print("rank", rank, "read", out[0])
PY
SMB_SMBD=$build/smb-server/smbd "$venv/bin/smbrun" -np 2 --local-servers 2 --capacity 64M --timeout 120 -- \
  "$venv/bin/python" "$scratch/job.py" || fail "a job under the environment's smbrun"
# The same launcher as a module.
SMB_SMBD=$build/smb-server/smbd "$venv/bin/python" -m smb.run --help >/dev/null || fail "python3 -m smb.run --help"
echo "pip_install: ok"
