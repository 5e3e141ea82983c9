#!/usr/bin/env bash
# Installs every Debian 12 package that the build, the tests and the
# benchmarks need. Idempotent and fast: when all packages are already
# installed it does not touch apt at all.
#
#   deploy/install-deps.sh            install what is missing (needs root or sudo)
#   deploy/install-deps.sh --check    only report what is missing (exit 1 if any)
#   deploy/install-deps.sh --list     print the package list
#
# Keep this list in step with cmake/SmbDependencies.cmake.
set -euo pipefail

PACKAGES=(
  # toolchain (ccache: run-tests.sh caches compiles across runs)
  cmake ninja-build g++ pkg-config ccache
  # data path: UCX (library, ucx_info, ucx_perftest) and the verbs stack it can use
  libucx-dev ucx-utils libibverbs-dev librdmacm-dev rdma-core ibverbs-utils perftest
  # control plane and tools
  libboost-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libxxhash-dev libssl-dev
  # smbd as a service: its TOML config file, sd_notify, and systemd's tools
  # that check the units (systemd-analyze, systemd-sysusers)
  libtomlplusplus-dev libsystemd-dev systemd
  # smbd --metrics (prometheus-cpp), and the parser its test reads them with
  prometheus-cpp-dev python3-prometheus-client
  # deploy/: the Slurm script is checked with shellcheck, the manifests
  # read with a real YAML parser
  shellcheck python3-yaml
  # tests, and the fuzz targets (clang's libFuzzer, ASan, UBSan)
  libgtest-dev libgmock-dev clang libclang-rt-14-dev
  # scripts (free-port lookup, process tools), and the benchmarks' TCP reference
  python3 procps iproute2 util-linux jq iperf3
  # launching workers across hosts (smbrun -H, mpirun)
  openmpi-bin libopenmpi-dev
  # plugins: the smb Python package (pybind11, DLPack) and smb.torch (Debian's torch, CPU, with gloo)
  pybind11-dev libdlpack-dev python3-dev python3-numpy python3-torch python3-sklearn python3-matplotlib python3-h5py python3-torchvision
  # pip install of the smb package (pyproject.toml), offline, into a virtual environment
  python3-pip python3-setuptools python3-wheel python3-venv
)

log() { printf 'install-deps: %s\n' "$*" >&2; }

missing_packages() {
  local pkg
  for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
      printf '%s\n' "$pkg"
    fi
  done
}

as_root() {
  if [[ $(id -u) -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    log "need root to run: $* (run as root or install sudo)"
    return 1
  fi
}

install_packages() {
  local -a missing=("$@")
  log "installing ${#missing[@]} package(s): ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

main() {
  case "${1:-}" in
    --list) printf '%s\n' "${PACKAGES[@]}"; return 0 ;;
    --check | "") ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; return 0 ;;
    *) log "unknown option '$1' (try --help)"; return 2 ;;
  esac

  if ! command -v dpkg-query >/dev/null 2>&1; then
    log "dpkg-query not found: this script supports Debian 12 (and derivatives) only"
    return 1
  fi

  local -a missing
  mapfile -t missing < <(missing_packages)
  if [[ ${#missing[@]} -eq 0 ]]; then
    log "all ${#PACKAGES[@]} packages present"
    return 0
  fi
  if [[ "${1:-}" == "--check" ]]; then
    log "missing: ${missing[*]}"
    return 1
  fi
  install_packages "${missing[@]}"

  mapfile -t missing < <(missing_packages)
  if [[ ${#missing[@]} -ne 0 ]]; then
    log "still missing after apt-get install: ${missing[*]}"
    return 1
  fi
  log "done"
}

main "$@"
