#!/usr/bin/env bash
# The GPU paths, checked on a machine with an NVIDIA GPU, in one command.
#
# The CUDA code (the update engine's NCCL group and device memory,
# smb.torch on CUDA tensors) compiles everywhere but has never run where
# there is no GPU. This script runs all of it in one go, under 8 minutes:
#
#   1. here, on the build machine (no GPU needed):
#        tools/gpu-check.sh pack [BUILD_DIR]
#      builds BUILD_DIR (default build/ci: libsmb-engine with CUDA and NCCL, which
#      configure finds under /usr/local/cuda) and packs what the GPU machine
#      needs into .gpu-check/ (git-ignored, about 20 MB): smbd, the GPU test
#      binary, libsmb and the libraries it needs that a CUDA image lacks
#      (UCX, spdlog, ...), the headers to build the Python module there.
#      A GPU machine has no package archive, so nothing is built there but
#      the Python module, for that machine's Python and torch.
#   2. on the GPU machine, in the repository root, with .gpu-check/ carried:
#        tools/gpu-check.sh [run]
#      writes the report to $OUT/gpu-check.md (else ./gpu-check.md) and the
#      logs beside it; exit status 1 if a check failed.
#
# What the run does, each step bounded:
#   - nvidia-smi, torch's CUDA and NCCL versions;
#   - the GPU tests (smb_gpu_tests: the update engine on device memory,
#     the NCCL group with 2 GPUs), which skip for lack of a GPU elsewhere;
#   - the Python module (smb._core) built for this python3;
#   - tools/gpu/torch_cuda_check.py, 2 ranks: smb.torch's collectives and
#     DistributedOptimizer on CUDA tensors, the engine on device memory;
#   - tools/gpu/cuda_exchange_profile.py, 2 ranks: where the exchange of
#     resnet18's CUDA gradients spends its time (copies, the fabric, gloo);
#   - the synthetic benchmark (resnet18) on CUDA: smb.torch against DDP
#     over NCCL, 2 processes (DDP with 1 if NCCL refuses 2 on one GPU),
#     and against DDP over gloo with the same 2 processes;
#   - the small-tensor exchange on the machine's CPUs (issue 33's 8-byte
#     target, which a 2-core build machine cannot judge): torch_bench.py's
#     exchange worker, 4 ranks, 8 B to 1 MB, smb.torch against gloo, then
#     its small worker (an 8 B and a 4 KiB allreduce through gloo,
#     hvd.allreduce, the engine and the C++ lane), judged against
#     ucx_perftest's active-message round trip (packed).
# Not covered: Caffe's GPU mode (smb-caffe builds BVLC Caffe CPU_ONLY:
# plugins/caffe/build-caffe.sh).
#
# SMB_GPU_CHECK_STEPS="NAME ..." runs only those steps (the Python module
# is built whenever a step needs it).
#
# `run --cpu` does every step without a GPU (the GPU checks skip or run on
# CPU tensors): how tests/gpu_check_test.sh checks this script in CI.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The interpreter with torch: a GPU image's python3; $SMB_PYTHON to choose.
PYTHON="${SMB_PYTHON:-python3}"
PACK="${SMB_GPU_CHECK_DIR:-$ROOT/.gpu-check}"  # another place: tests/gpu_check_test.sh
BUDGET_S=460  # the whole run stays under 8 minutes: each step gets at most what is left
MODE="${1:-run}"

die() { echo "gpu-check: $*" >&2; exit 2; }

# ---------------------------------------------------------------- pack

# Libraries a CUDA image is expected to have (or that must come from the
# machine itself: the C library, the C++ runtime, CUDA, NCCL).
system_lib() {
  case "$1" in
    linux-vdso* | ld-linux* | libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | libstdc++.so* | \
      libgcc_s.so* | libcuda.so* | libcudart.so* | libnccl.so* | libpython*) return 0 ;;
  esac
  return 1
}

pack() {
  local build="${1:-$ROOT/build/ci}"
  [ -f "$build/CMakeCache.txt" ] || die "$build is not configured (cmake --preset ci)"
  grep -q '^SMB_WITH_CUDA:BOOL=ON' "$build/CMakeCache.txt" ||
    die "$build was configured without CUDA (SMB_WITH_CUDA is not ON): the check would find nothing to run"
  cmake --build "$build" --target smbd smb smb_engine smb_gpu_tests smb_python smb_torch >/dev/null || die "the build failed"
  rm -rf "$PACK"
  mkdir -p "$PACK/bin" "$PACK/lib" "$PACK/include/smb" "$PACK/include/dlpack" "$PACK/python"
  cp "$build/smb-server/smbd" "$build/tests/smb_gpu_tests" "$PACK/bin/"
  cp "$build/tools/smbrun/smbrun" "$PACK/bin/"
  cp "$(command -v ucx_perftest)" "$PACK/bin/" || die "ucx_perftest is missing (apt-get install ucx-utils)"
  cp -L "$build/smb-client/libsmb.so.0" "$build/smb-engine/libsmb-engine.so.0" "$PACK/lib/"
  ln -s libsmb.so.0 "$PACK/lib/libsmb.so"
  # What libsmb, smbd and the tests load, less what the machine provides.
  local lib
  for lib in $(ldd "$PACK/bin/smbd" "$PACK/bin/smb_gpu_tests" "$PACK/bin/ucx_perftest" "$PACK/lib/libsmb.so.0" \
    "$PACK/lib/libsmb-engine.so.0" |
    awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do
    case "$(basename "$lib")" in libsmb.so* | libsmb-engine.so*) continue ;; esac
    system_lib "$(basename "$lib")" || cp -L "$lib" "$PACK/lib/"
  done
  strip --strip-debug "$PACK/bin/smbd" "$PACK/bin/smb_gpu_tests" "$PACK/lib/libsmb.so.0" "$PACK/lib/libsmb-engine.so.0"
  # UCX loads its transports (libuct_*.so.0) from <libucs's directory>/ucx.
  local ucx_modules module
  ucx_modules="$(dirname "$(ldd "$PACK/lib/libsmb.so.0" | awk '$1 ~ /^libucs/ {print $3}')")/ucx"
  mkdir -p "$PACK/lib/ucx"
  for module in "$ucx_modules"/*.so.0; do [ -e "$module" ] && cp -L "$module" "$PACK/lib/ucx/"; done
  cp "$build/include/smb/config.h" "$PACK/include/smb/"
  cp /usr/include/dlpack/dlpack.h "$PACK/include/dlpack/" || die "dlpack.h is missing (apt-get install libdlpack-dev)"
  # The Python package without its module (built on the GPU machine).
  cp -r "$build/python/smb" "$PACK/python/"
  find "$PACK/python" \( -name '_core*.so' -o -name __pycache__ \) -prune -exec rm -rf {} +
  echo "gpu-check: packed $(du -sh "$PACK" | cut -f1) into $PACK; on the GPU machine run: tools/gpu-check.sh"
}

# ---------------------------------------------------------------- run

REPORT=""
LOGS=""
FAILED=0

say() { echo "$*" | tee -a "$REPORT"; }

# step NAME LIMIT_S COMMAND...: runs it with its output in $LOGS/NAME.log,
# the tail of that in the report; a failure marks the run failed.
step() {
  local name="$1" limit="$2"
  shift 2
  wanted "$name" || return 0
  local log="$LOGS/$name.log" started=$SECONDS rc
  [ $((BUDGET_S - SECONDS)) -lt "$limit" ] && limit=$((BUDGET_S - SECONDS))
  if [ "$limit" -le 5 ]; then
    FAILED=1
    say "- **$name**: NOT RUN (the run's ${BUDGET_S} s are spent)"
    return 1
  fi
  timeout --kill-after=5 "$limit" "$@" >"$log" 2>&1
  rc=$?
  local took=$((SECONDS - started))
  if [ $rc -eq 0 ]; then
    say "- **$name**: ok (${took} s)"
  else
    FAILED=1
    [ $rc -eq 124 ] && say "- **$name**: TIMED OUT after ${limit} s" || say "- **$name**: FAILED (exit $rc, ${took} s)"
  fi
  { echo '```'; tail -n 25 "$log"; echo '```'; } >>"$REPORT"
  return $rc
}

# Whether SMB_GPU_CHECK_STEPS (default: every step) names step $1.
wanted() {
  [ -z "${SMB_GPU_CHECK_STEPS:-}" ] && return 0
  case " $SMB_GPU_CHECK_STEPS " in *" $1 "*) return 0 ;; esac
  return 1
}

library_path() {
  # The packed libraries only where the machine has none of that name, so
  # that its own (newer) copies win; CUDA's and NCCL's from the toolkit or
  # from torch's wheels. UCX always ours, whole: its transports are modules
  # loaded from UCX_MODULE_DIR, and a machine's own libucs (Ubuntu 24.04's
  # 1.16, say) refuses our 1.13 modules, which leaves UCX without shared
  # memory and CMA: the fabric then ran over TCP loopback (seen on the first
  # GPU machine, 2026-11-27).
  local use="$PACK/use"
  rm -rf "$use" && mkdir -p "$use"
  local f name
  for f in "$PACK"/lib/*.so*; do
    name="$(basename "$f")"
    case "$name" in libucp.so* | libuct.so* | libucs.so* | libucm.so*) ln -sf "$f" "$use/$name"; continue ;; esac
    ldconfig -p 2>/dev/null | grep -qF "	$name (" || ln -sf "$f" "$use/$name"
  done
  [ -d "$PACK/lib/ucx" ] && ln -s "$PACK/lib/ucx" "$use/ucx"
  ln -sf "$PACK/lib/libsmb.so.0" "$use/libsmb.so.0"
  ln -sf "$PACK/lib/libsmb-engine.so.0" "$use/libsmb-engine.so.0"
  local dirs="$use"
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [ -d "$d" ] && dirs="$dirs:$d"; done
  d="$("$PYTHON" - 2>/dev/null <<'EOF'
import glob, os, site
found = []
for base in site.getsitepackages():
    for pattern in ("nvidia/nccl/lib", "nvidia/cu*/lib", "nvidia/cuda_runtime/lib"):
        found += glob.glob(os.path.join(base, pattern))
print(":".join(found))
EOF
)"
  [ -n "$d" ] && dirs="$dirs:$d"
  echo "$dirs"
}

build_python_module() {
  local suffix include
  suffix="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')" || return 1
  include="$("$PYTHON" -c 'import pybind11; print(pybind11.get_include())' 2>/dev/null)"
  [ -n "$include" ] || include=/usr/include  # Debian's pybind11-dev (run --cpu)
  local py_include
  py_include="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
  local objs=() src pids=()
  mkdir -p "$PACK/obj"
  # smb._core: its bindings and the collectives' arrival board (plugins/collective).
  for src in "$ROOT"/plugins/python/src/*.cpp "$ROOT"/plugins/collective/*.cpp; do
    local obj="$PACK/obj/$(basename "$src" .cpp).o"
    objs+=("$obj")
    c++ -std=c++20 -O1 -fPIC -fvisibility=hidden -I"$include" -I"$py_include" -I"$ROOT/include" \
      -I"$PACK/include" -I"$ROOT/plugins/python/src" -I"$ROOT/plugins/collective" -c "$src" -o "$obj" &
    pids+=($!)
  done
  local p ok=0
  for p in "${pids[@]}"; do wait "$p" || ok=1; done
  [ $ok -eq 0 ] || return 1
  c++ -shared "${objs[@]}" -L"$PACK/lib" -l:libsmb-engine.so.0 -l:libsmb.so.0 -Wl,-rpath,"$PACK/use" \
    -o "$PACK/python/smb/_core$suffix" && echo "built $PACK/python/smb/_core$suffix"
}

# The profile once per UCX_TLS in $SMB_GPU_CHECK_UCX_TLS ("default": unset).
exchange_profile() {
  local tls rc=0
  for tls in ${SMB_GPU_CHECK_UCX_TLS:-default}; do
    echo "UCX_TLS=$tls"
    if [ "$tls" = default ]; then
      "$PYTHON" "$PACK/bin/smbrun" -np 2 --local-servers 2 --capacity 1G --timeout 60 \
        -- "$PYTHON" "$ROOT/tools/gpu/cuda_exchange_profile.py" --device "$1" || rc=1
    else
      UCX_TLS="$tls" "$PYTHON" "$PACK/bin/smbrun" -np 2 --local-servers 2 --capacity 1G --timeout 60 \
        -- "$PYTHON" "$ROOT/tools/gpu/cuda_exchange_profile.py" --device "$1" || rc=1
    fi
  done
  return $rc
}

# Issue 33's small-tensor exchange, 4 ranks (each with a CPU of its own
# here), and the UCX round trip it is judged against.
small_exchange() {
  local worker=/tmp/smb-gpu-check-exchange-worker.py
  PYTHONPATH="$ROOT/tools/bench" "$PYTHON" -c \
    'import torch_bench as t; print(t.EXCHANGE_WORKER % ((8, 4096, 1 << 20),))' >"$worker" || return 1
  "$PYTHON" "$PACK/bin/smbrun" -np 4 --local-servers 2 --capacity 1G --timeout 100 -- "$PYTHON" "$worker" || return 1
  # The fixed cost at each layer (gloo, hvd.allreduce, the engine, the C++
  # lane) against the target, which wants a CPU per rank: this machine's.
  local small=/tmp/smb-gpu-check-small-worker.py
  PYTHONPATH="$ROOT/tools/bench" "$PYTHON" -c 'import torch_bench as t; print(t.SMALL_WORKER)' >"$small" || return 1
  "$PYTHON" "$PACK/bin/smbrun" -np 4 --local-servers 2 --capacity 1G --timeout 100 -- "$PYTHON" "$small" |
    grep '^{' >"$small.json" || return 1
  PATH="$PACK/bin:$PATH" PYTHONPATH="$ROOT/tools/bench" "$PYTHON" -c \
    'import json, sys, torch_bench as t; t.print_small([json.load(open(sys.argv[1]))], 4, t.ucx_am_round_trip_us())' \
    "$small.json"
}

synthetic() {
  local device="$1" out="$PACK/synthetic.jsonl"  # (the report may bring back 8 files: not in $LOGS)
  local bench=("$PYTHON" "$ROOT/plugins/torch/examples/synthetic_benchmark.py" --json --model resnet18
    --batch-size "${SMB_GPU_CHECK_BATCH:-32}" --image-size 112 --iters "${SMB_GPU_CHECK_ITERS:-20}" --device "$device")
  local run=("$PACK/bin/smbrun" --local-servers 2 --capacity 2G --timeout 90)
  : >"$out"
  "$PYTHON" "${run[@]}" -np 2 -- "${bench[@]}" | grep '^{' >>"$out" || return 1
  if [ "$device" = cuda ]; then
    "$PYTHON" "${run[@]}" -np 2 -- "${bench[@]}" --baseline ddp-nccl | grep '^{' >>"$out" ||
      "$PYTHON" "${run[@]}" -np 1 -- "${bench[@]}" --baseline ddp-nccl | grep '^{' >>"$out"
  fi
  # The same processes on the same device, with gloo's exchange.
  "$PYTHON" "${run[@]}" -np 2 -- "${bench[@]}" --baseline ddp-gloo | grep '^{' >>"$out"
  cat "$out"
  "$PYTHON" - "$out" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
smb = next(r for r in rows if r["backend"] == "smb")
for r in rows:
    if r["backend"] != "smb":
        print(f"smb.torch ({smb['workers']} workers) / {r['backend']} ({r['workers']}): "
              f"{smb['images_per_second_per_worker'] / r['images_per_second_per_worker']:.2f}x images/s per worker; "
              f"smb.torch's exchange {smb.get('exchange_ms_per_step', 0):.0f} ms/step, "
              f"{smb.get('hidden_fraction', 0):.0%} of it behind backward")
EOF
}

run() {
  local cpu="${1:-}"
  [ -d "$PACK/bin" ] || die "$PACK is missing: run 'tools/gpu-check.sh pack' on the build machine and carry .gpu-check"
  local out="${OUT:-$ROOT}"
  REPORT="$out/gpu-check.md"
  LOGS="$out/gpu-check-logs"
  mkdir -p "$LOGS"
  : >"$REPORT"
  say "# gpu-check $(date -u +%Y-%m-%dT%H:%MZ) on $(hostname)"
  say ""
  if [ -z "$cpu" ] && ! nvidia-smi -L >/dev/null 2>&1; then
    say "No NVIDIA GPU here (nvidia-smi -L failed): run this on a GPU machine, or 'run --cpu' to check the script."
    exit 2
  fi
  say "## The machine"
  { echo '```'; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | head -5
    scope="$(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo absent)"
    echo "kernel.yama.ptrace_scope: $scope$(case "$scope" in 0 | absent) ;; *) echo " (UCX may have no CMA between processes)" ;; esac)"
    "$PYTHON" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)' 2>&1
    echo '```'; } >>"$REPORT"
  export LD_LIBRARY_PATH
  LD_LIBRARY_PATH="$(library_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export UCX_MODULE_DIR="$PACK/use/ucx" SMB_SMBD="$PACK/bin/smbd" PYTHONPATH="$PACK/python" OMP_NUM_THREADS=4
  export PYTHONUNBUFFERED=1 PACK ROOT LOGS PYTHON
  export -f build_python_module exchange_profile small_exchange synthetic  # run by step, under timeout
  say ""
  say "## Checks"
  step libraries 30 bash -c "! ldd '$PACK/bin/smb_gpu_tests' '$PACK/bin/smbd' | grep -B1 'not found'" &&
    { ldd "$PACK/lib/libsmb-engine.so.0" | grep -E 'nccl|cudart|ucp' >>"$LOGS/libraries.log"; }
  step gpu_tests 90 "$PACK/bin/smb_gpu_tests" --gtest_color=no
  if SMB_GPU_CHECK_STEPS="${SMB_GPU_CHECK_STEPS:+$SMB_GPU_CHECK_STEPS python_module}" \
    step python_module 150 bash -c build_python_module; then
    local cpu_env=()
    [ -n "$cpu" ] && cpu_env=(SMB_GPU_CHECK_ON_CPU=1)
    step torch_cuda 100 env "${cpu_env[@]}" "$PYTHON" "$PACK/bin/smbrun" -np 2 --local-servers 2 --capacity 1G \
      --timeout 90 -- "$PYTHON" "$ROOT/tools/gpu/torch_cuda_check.py"
    step exchange_profile 120 bash -c "exchange_profile $([ -n "$cpu" ] && echo cpu || echo cuda)"
    step small_exchange 150 bash -c small_exchange
    step synthetic 200 bash -c "synthetic $([ -n "$cpu" ] && echo cpu || echo cuda)"
  fi
  say ""
  say "Result: $([ $FAILED -eq 0 ] && echo 'every step ran' || echo 'SOME STEPS FAILED') in $SECONDS s; logs in $LOGS"
  return $FAILED
}

case "$MODE" in
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  --cpu) run --cpu ;;
  -h | --help) sed -n '2,40p' "$0" ;;
  *) die "usage: tools/gpu-check.sh pack [BUILD_DIR] | tools/gpu-check.sh [run [--cpu]]" ;;
esac
