#pragma once
// The fuzz targets that read files (checkpoints, config files) get each
// input as the contents of one scratch file of their own, removed at exit.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <span>
#include <string>

#include <unistd.h>

namespace smb::fuzz {

inline const std::string& scratch_path() {
  static const std::string path = [] {
    std::string templ = "/tmp/smb-fuzz.XXXXXX";
    const int fd = ::mkstemp(templ.data());
    if (fd < 0) std::abort();
    ::close(fd);
    return templ;
  }();
  static const bool removed_at_exit = [] { return std::atexit([] { ::unlink(scratch_path().c_str()); }) == 0; }();
  (void)removed_at_exit;
  return path;
}

inline const std::string& write_scratch(std::span<const std::uint8_t> bytes) {
  std::ofstream(scratch_path(), std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return scratch_path();
}

}  // namespace smb::fuzz
