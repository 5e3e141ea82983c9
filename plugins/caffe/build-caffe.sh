#!/usr/bin/env bash
# Builds BVLC Caffe (CPU only) from the vendored source tarball, with our
# patches, into a cache that survives clones and CI runs (like the
# soft-RoCE suite's kernel), and prints the directory to give CMake as
# Caffe_DIR. Neither Debian nor any registry here ships Caffe; Caffe's
# code is never copied into this repository.
#
#   plugins/caffe/build-caffe.sh [--tarball FILE] [--cache DIR] [--print-dir]
#     --tarball FILE  default: caffe-bvlc-*.tar.gz in $SMB_VENDOR_DIR, ../shared/vendor beside the
#                     repository, or /work/shared/vendor
#     --cache DIR     default: $SMB_CACHE_DIR or ~/.cache/smb
#     --print-dir     print the Caffe_DIR of a cached build and exit (1 if none)
#
# The cache key is the tarball's and the patches' checksums: a new tarball
# or patch builds anew. About 3 minutes on 2 cores the first time, nothing
# afterwards. Exit 77 (skip) when there is no tarball.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${SMB_CACHE_DIR:-$HOME/.cache/smb}
TARBALL=""
PRINT_ONLY=0
while (($# > 0)); do
  case "$1" in
    --tarball) TARBALL=$2; shift ;;
    --cache) CACHE=$2; shift ;;
    --print-dir) PRINT_ONLY=1 ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "build-caffe: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
if [[ -z $TARBALL ]]; then
  # Beside the checkout, or the workplace's shared folder (a CI clone may live elsewhere).
  for vendor in ${SMB_VENDOR_DIR:-} "$ROOT/../shared/vendor" /work/shared/vendor; do
    TARBALL=$(ls "$vendor"/caffe-bvlc-*.tar.gz 2>/dev/null | head -1 || true)
    [[ -n $TARBALL ]] && break
  done
fi
if [[ -z $TARBALL || ! -f $TARBALL ]]; then
  echo "build-caffe: no Caffe source tarball (../shared/vendor/caffe-bvlc-*.tar.gz): the Caffe plugin is skipped" >&2
  exit 77
fi

key=$(cat "$TARBALL" "$HERE"/patches/*.patch | sha256sum | cut -c1-16)
dir=$CACHE/caffe-$key
config=$dir/install/share/Caffe
if [[ -f $dir/complete && -f $config/CaffeConfig.cmake ]]; then
  echo "$config"
  exit 0
fi
((PRINT_ONLY)) && exit 1

# Debian 12's packages for a CPU-only Caffe with HDF5 data (no OpenCV, LMDB, LevelDB).
deps=(libprotobuf-dev protobuf-compiler libgoogle-glog-dev libgflags-dev libhdf5-dev libopenblas-dev
      libboost-system-dev libboost-thread-dev libboost-filesystem-dev)
missing=()
for pkg in "${deps[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "build-caffe: installing ${missing[*]}" >&2
  sudo=(); [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

mkdir -p "$CACHE"
work=$(mktemp -d "$CACHE/caffe-build-XXXXXX")
trap 'rm -rf "$work"' EXIT
# Caffe writes its install prefix into the RPATHs of what it installs, so it
# is installed where it stays; the stamp file says the install is whole.
rm -rf "$dir"
mkdir -p "$dir"
echo "build-caffe: building Caffe from $(basename "$TARBALL") into $dir (about 3 minutes)" >&2
mkdir -p "$work/src"
tar xzf "$TARBALL" -C "$work/src"
for p in "$HERE"/patches/*.patch; do
  patch -d "$work/src" -p1 --quiet < "$p"
done
cmake -S "$work/src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCPU_ONLY=ON -DBUILD_python=OFF \
  -DBUILD_docs=OFF -DUSE_OPENCV=OFF -DUSE_LEVELDB=OFF -DUSE_LMDB=OFF -DBLAS=Open -DCMAKE_CXX_STANDARD=17 \
  -DCMAKE_INSTALL_PREFIX="$dir/install" >"$work/configure.log" 2>&1 ||
  { tail -30 "$work/configure.log" >&2; exit 1; }
cmake --build "$work/build" --target install >"$work/build.log" 2>&1 || { tail -30 "$work/build.log" >&2; exit 1; }
touch "$dir/complete"
echo "$config"
