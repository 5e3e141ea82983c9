#!/usr/bin/env bash
# tools/gpu-check.sh where there is no GPU: the pack is made (into a
# temporary directory) and holds what a GPU machine needs, and every step
# of the run works (`run --cpu`: the GPU tests skip saying why, the Python
# module builds, the CUDA checks run on CPU tensors, the benchmark runs a
# few steps). What only a GPU can show stays for the GPU machine.
# Usage: gpu_check_test.sh BUILD_DIR. Exit 77 (skip) without Debian's torch.
set -euo pipefail
build="$1"
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
/usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null ||
  { echo "skip: needs /usr/bin/python3 with torch and torchvision (python3-torch, python3-torchvision)"; exit 77; }
dir="$(mktemp -d)"
trap '[ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
export SMB_GPU_CHECK_DIR="$dir/pack" OUT="$dir/out" SMB_PYTHON=/usr/bin/python3
export SMB_GPU_CHECK_ITERS=2 SMB_GPU_CHECK_BATCH=4
mkdir -p "$OUT"

"$src/tools/gpu-check.sh" pack "$build"
for f in bin/smbd bin/smb_gpu_tests bin/smbrun bin/ucx_perftest lib/libsmb.so.0 lib/libucp.so.0 lib/ucx/libuct_cma.so.0 \
  include/smb/config.h include/dlpack/dlpack.h python/smb/__init__.py python/smb/torch/optimizer.py; do
  [ -e "$SMB_GPU_CHECK_DIR/$f" ] || { echo "FAIL: the pack lacks $f"; exit 1; }
done
if ls "$SMB_GPU_CHECK_DIR"/python/smb/_core*.so >/dev/null 2>&1; then
  echo "FAIL: the pack carries this machine's Python module (it is built on the GPU machine)"; exit 1
fi
size_kb="$(du -sk "$SMB_GPU_CHECK_DIR" | cut -f1)"
[ "$size_kb" -lt $((48 * 1024)) ] || { echo "FAIL: the pack is ${size_kb} KiB (a device call carries 64 MiB)"; exit 1; }

status=0
"$src/tools/gpu-check.sh" run --cpu || status=$?
cat "$OUT/gpu-check.md"
[ "$status" -eq 0 ] || { echo "FAIL: gpu-check.sh run --cpu exited $status"; exit 1; }
grep -q "every step ran" "$OUT/gpu-check.md"
grep -q "SKIPPED.*OneWorkerOnDeviceMemory" "$OUT/gpu-check-logs/gpu_tests.log" ||
  { echo "FAIL: the GPU tests did not skip for lack of a GPU"; exit 1; }
for check in allreduce grouped_allreduce allgather broadcast optimizer engine; do
  [ "$(grep -o "\"check\": \"$check\", \"rank\": [01], \"status\": \"pass\"" "$OUT/gpu-check-logs/torch_cuda.log" | wc -l)" -eq 2 ] ||
    { echo "FAIL: check $check did not pass on both ranks"; exit 1; }
done
grep -q "images/s per worker" "$OUT/gpu-check-logs/synthetic.log" || { echo "FAIL: no benchmark ratio"; exit 1; }
grep -q '"what": "fabric_read"' "$OUT/gpu-check-logs/exchange_profile.log" || { echo "FAIL: no exchange profile"; exit 1; }
grep -q '"bytes": 8, "gloo_ms"' "$OUT/gpu-check-logs/small_exchange.log" || { echo "FAIL: no 8-byte exchange"; exit 1; }
grep -q "UCX active-message round trip here: [0-9]" "$OUT/gpu-check-logs/small_exchange.log" ||
  { echo "FAIL: ucx_perftest did not run from the pack"; exit 1; }
grep -Eq '^\| 8 B \| b2b \|( [0-9.]+ \|){7}$' "$OUT/gpu-check-logs/small_exchange.log" ||
  { echo "FAIL: no 8-byte lane against the target"; exit 1; }
[ "$(find "$OUT" -type f | wc -l)" -le 8 ] || { echo "FAIL: more than 8 files to bring back (a device call brings back 8)"; exit 1; }
echo "gpu-check.sh: its CPU parts work"
