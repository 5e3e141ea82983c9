#!/bin/bash
# Installs the build (cmake --install) into a scratch prefix, then builds
# and runs a user's project against it (consumer/): find_package(smb) must
# work without libsmb's private dependencies (UCX, spdlog, json, xxhash).
# $1: the build directory, $2: tests/package.
set -euo pipefail
build=$1 here=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build" --prefix "$scratch/prefix" >"$scratch/install.log" || { cat "$scratch/install.log"; exit 1; }
for header in smb.hpp smb.h config.h client.hpp update_engine.hpp; do
  [[ -f $scratch/prefix/include/smb/$header ]] || { echo "not installed: include/smb/$header"; exit 1; }
done
# The installed programs run from a prefix outside the loader's path (no
# LD_LIBRARY_PATH): they find libsmb through their RPATH ($ORIGIN/../lib...).
for tool in smbd smbctl smb-bench; do
  out=$(env -u LD_LIBRARY_PATH "$scratch/prefix/bin/$tool" --help 2>&1) ||
    { echo "installed $tool does not run:"; echo "$out"; exit 1; }
done
for file in lib/systemd/system/smbd.service lib/systemd/system/smbd@.service lib/sysusers.d/smbd.conf \
            lib/systemd/system/smb-repair.service \
            etc/smb/smbd.toml share/doc/smb/operations.md; do
  [[ -f $scratch/prefix/$file ]] || { echo "not installed: $file"; exit 1; }
done
env -u LD_LIBRARY_PATH "$scratch/prefix/bin/smbd" --check-config "$scratch/prefix/etc/smb/smbd.toml"
private='PkgConfig::|spdlog::|nlohmann_json|find_dependency|pkg_check_modules|ucp|ibverbs'
if grep -rnE "$private" "$scratch/prefix/lib/cmake/smb/" | grep -vE ':[0-9]+:\s*#'; then
  echo "the exported package (above) needs a private dependency of libsmb"
  exit 1
fi
# The layers: libsmb (the fabric's client) holds no engine and links no CUDA
# or NCCL; libsmb-engine holds the engine.
libdir=$(dirname "$(find "$scratch/prefix" -name 'libsmb.so.0' | head -1)")
if nm -DC --defined-only "$libdir/libsmb.so.0" | grep -E 'UpdateEngine|EngineCore|smb::gpu::'; then
  echo "libsmb.so exports the engine's symbols (above): they belong to libsmb-engine"
  exit 1
fi
if readelf -d "$libdir/libsmb.so.0" | grep -E 'NEEDED.*(cuda|nccl)'; then
  echo "libsmb.so links CUDA or NCCL (above): only libsmb-engine may"
  exit 1
fi
engine_symbols=$(nm -DC --defined-only "$libdir/libsmb-engine.so.0")
[[ $engine_symbols == *'smb::UpdateEngine::after_step'* ]] ||
  { echo "libsmb-engine.so.0 does not export smb::UpdateEngine"; exit 1; }
[[ "$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --libs smb-engine)" == *-lsmb-engine*-lsmb* ]] ||
  { echo "pkg-config smb-engine: $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --libs smb-engine 2>&1)"; exit 1; }
cmake -S "$here/consumer" -B "$scratch/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$scratch/configure.log" || { cat "$scratch/configure.log"; exit 1; }
cmake --build "$scratch/consumer" || exit 1
"$scratch/consumer/consumer_cpp"
"$scratch/consumer/consumer_c"
"$scratch/consumer/consumer_engine"
