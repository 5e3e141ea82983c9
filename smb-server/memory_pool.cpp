#include "memory_pool.hpp"

#include "util/parse.hpp"

#include <smb/error.hpp>

#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack it
#endif

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

namespace smb::server {
namespace {

constexpr std::uint64_t kHugePage = 2ull << 20;
constexpr std::uint64_t kPage = 4096;

std::uint64_t available_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;  // unknown: let mmap decide
}

}  // namespace

MemoryPool::MemoryPool(std::uint64_t capacity) {
  if (capacity == 0) throw Error(Errc::invalid_argument, "--capacity must be greater than zero");
  const std::uint64_t available = available_memory();
  if (available != 0 && capacity > available)
    throw Error(Errc::no_space, "--capacity " + util::format_bytes(capacity) + " exceeds the " +
                                    util::format_bytes(available) +
                                    " of memory this machine has available; lower --capacity");
  size_ = (capacity + kHugePage - 1) / kHugePage * kHugePage;
  void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
  if (p != MAP_FAILED) {
    huge_pages_ = true;  // the kernel reserved them: faulting them in later cannot fail
  } else {
    p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw Error(Errc::no_space, "cannot reserve " + util::format_bytes(size_) + " of memory: " +
                                      std::strerror(errno) + "; lower --capacity");
    ::madvise(p, size_, MADV_HUGEPAGE);
  }
  base_ = static_cast<std::byte*>(p);
}

bool MemoryPool::fault_in(std::byte* p, std::uint64_t n) {
  if (::madvise(p, n, MADV_POPULATE_WRITE) == 0) return true;
  if (errno != EINVAL) return false;  // EINVAL: a kernel without MADV_POPULATE_WRITE
  for (std::uint64_t off = 0; off < n; off += kPage)
    std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(p + off)).fetch_add(0, std::memory_order_relaxed);
  return true;
}

MemoryPool::~MemoryPool() {
  if (base_ != nullptr) ::munmap(base_, size_);
}

}  // namespace smb::server
