#pragma once
// A random 64-bit identity, never 0 (0 stands for "none given"): an smbd
// run's instance, a client's identity.
#include <cstdint>
#include <random>

namespace smb::util {

inline std::uint64_t random_id() {
  std::random_device device;
  std::uint64_t id = 0;
  while (id == 0) id = (std::uint64_t{device()} << 32) | device();
  return id;
}

}  // namespace smb::util
