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

# rdma-core for the native verbs transport: on by default where it is found.
pkg_check_modules(IBVERBS QUIET IMPORTED_TARGET libibverbs)
pkg_check_modules(RDMACM QUIET IMPORTED_TARGET librdmacm)
if(IBVERBS_FOUND AND RDMACM_FOUND)
  option(SMB_WITH_VERBS "Build the native verbs transport (libibverbs, librdmacm)" ON)
else()
  option(SMB_WITH_VERBS "Build the native verbs transport (libibverbs, librdmacm)" OFF)
endif()
if(SMB_WITH_VERBS AND NOT (IBVERBS_FOUND AND RDMACM_FOUND))
  message(FATAL_ERROR "SMB_WITH_VERBS needs libibverbs-dev and librdmacm-dev (pkg-config libibverbs librdmacm)")
endif()
message(STATUS "native verbs transport: ${SMB_WITH_VERBS}")
