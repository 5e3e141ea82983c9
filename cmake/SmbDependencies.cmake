# Every dependency comes from a Debian package (see deploy/install-deps.sh).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx)
find_package(Boost 1.74 REQUIRED)            # header-only Asio
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 QUIET CONFIG)
if(NOT CLI11_FOUND)
  # Debian's libcli11-dev ships the header without a usable CMake package.
  find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 INTERFACE ${CLI11_INCLUDE_DIR})
endif()
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
find_package(OpenSSL 3 REQUIRED COMPONENTS Crypto)  # HMAC and randomness for authentication
pkg_check_modules(TOMLPP REQUIRED IMPORTED_TARGET tomlplusplus)  # smbd's config file
find_package(prometheus-cpp REQUIRED CONFIG)  # smbd --metrics
# sd_notify for systemd's Type=notify (deploy/systemd/): optional, smbd runs
# the same without it, only the service manager is not told it is ready.
pkg_check_modules(SYSTEMD IMPORTED_TARGET libsystemd)
if(SYSTEMD_FOUND)
  message(STATUS "systemd notification (sd_notify): ON")
else()
  message(STATUS "systemd notification (sd_notify): OFF (no libsystemd; install libsystemd-dev)")
endif()

# CUDA and NCCL for the update engine's GPU path (smb-engine/gpu/): on by
# default where the CUDA toolkit and NCCL >= 2.10 (ncclAvg) are found. Only
# the CUDA runtime API and NCCL are used, from ordinary C++ (no .cu files), so
# the C++ compiler builds it. NCCL is looked for under NCCL_ROOT (CMake or
# environment variable), then in the toolkit's directories, then the system's.
find_package(CUDAToolkit QUIET)
set(SMB_CUDA_MISSING "")
if(NOT CUDAToolkit_FOUND)
  set(SMB_CUDA_MISSING "no CUDA toolkit (find_package(CUDAToolkit); set CUDAToolkit_ROOT)")
else()
  find_path(NCCL_INCLUDE_DIR nccl.h
    HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
    PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY nccl
    HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}
    PATH_SUFFIXES lib64 lib)
  if(NOT EXISTS "${NCCL_INCLUDE_DIR}/nccl.h" OR NOT EXISTS "${NCCL_LIBRARY}")
    set(SMB_CUDA_MISSING "CUDA ${CUDAToolkit_VERSION} but no NCCL (nccl.h, libnccl; set NCCL_ROOT)")
  else()
    file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _smb_nccl_version REGEX "^#define NCCL_(MAJOR|MINOR) +[0-9]+")
    string(REGEX MATCH "NCCL_MAJOR +([0-9]+)" _ "${_smb_nccl_version}")
    set(NCCL_VERSION_MAJOR "${CMAKE_MATCH_1}")
    string(REGEX MATCH "NCCL_MINOR +([0-9]+)" _ "${_smb_nccl_version}")
    set(NCCL_VERSION_MINOR "${CMAKE_MATCH_1}")
    if("${NCCL_VERSION_MAJOR}.${NCCL_VERSION_MINOR}" VERSION_LESS 2.10)
      set(SMB_CUDA_MISSING "NCCL ${NCCL_VERSION_MAJOR}.${NCCL_VERSION_MINOR} in ${NCCL_INCLUDE_DIR} is older than 2.10 (no ncclAvg)")
    endif()
  endif()
endif()
# Build trees configured before this detection existed cached the old
# option's default (OFF, with this help text): forget it so that the new
# default applies. (A -DSMB_WITH_CUDA=OFF given in that same first
# configure is lost with it; later ones are kept.)
get_property(_smb_cuda_help CACHE SMB_WITH_CUDA PROPERTY HELPSTRING)
if(_smb_cuda_help STREQUAL "Build GPU code paths (needs CUDA)")
  unset(SMB_WITH_CUDA CACHE)
endif()
if(SMB_CUDA_MISSING STREQUAL "")
  option(SMB_WITH_CUDA "Build the update engine's GPU path (CUDA runtime and NCCL)" ON)
else()
  option(SMB_WITH_CUDA "Build the update engine's GPU path (CUDA runtime and NCCL)" OFF)
endif()
if(SMB_WITH_CUDA AND NOT SMB_CUDA_MISSING STREQUAL "")
  message(FATAL_ERROR "SMB_WITH_CUDA is ON but the GPU path cannot be built: ${SMB_CUDA_MISSING}. "
                      "Install the CUDA toolkit and NCCL >= 2.10, or configure with -DSMB_WITH_CUDA=OFF.")
endif()
if(SMB_WITH_CUDA)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES
    IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES CUDA::cudart)
  message(STATUS "CUDA/NCCL GPU path: ON (CUDA ${CUDAToolkit_VERSION}, NCCL ${NCCL_VERSION_MAJOR}.${NCCL_VERSION_MINOR}: ${NCCL_LIBRARY})")
elseif(SMB_CUDA_MISSING STREQUAL "")
  message(STATUS "CUDA/NCCL GPU path: OFF (disabled with SMB_WITH_CUDA=OFF)")
else()
  message(STATUS "CUDA/NCCL GPU path: OFF (${SMB_CUDA_MISSING})")
endif()
