# Warnings (errors in CI) and sanitizers, applied to every target we own.
add_library(smb_build_flags INTERFACE)
target_compile_options(smb_build_flags INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wconversion
  -Wno-sign-conversion -Wold-style-cast -Wimplicit-fallthrough
  $<$<BOOL:${SMB_WERROR}>:-Werror>)
if(SMB_SANITIZE)
  target_compile_options(smb_build_flags INTERFACE
    -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  target_link_options(smb_build_flags INTERFACE -fsanitize=address,undefined)
endif()
if(SMB_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "SMB_FUZZ needs clang (libFuzzer): configure with the 'fuzz' preset, or CC=clang CXX=clang++")
  endif()
  # Everything the fuzz targets link is instrumented for coverage and checked
  # by ASan and UBSan; the targets themselves link libFuzzer's main.
  target_compile_options(smb_build_flags INTERFACE
    -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  target_link_options(smb_build_flags INTERFACE -fsanitize=address,undefined)
endif()
