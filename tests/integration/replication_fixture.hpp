#pragma once
// The fixture of the replication and repair tests: a 3-server fabric, buffers
// with two copies of every stripe on small stripes (every server holds some).
#include "data.hpp"
#include "expect_error.hpp"
#include "fabric.hpp"

#include <smb/client.hpp>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

namespace smb::test {

constexpr std::uint64_t kUnit = 4096;

// `op` fails with `code`, and its message says `part`.
template <class Op>
void expect_error(Op op, smb::Errc code, const std::string& part) {
  EXPECT_TRUE(mentions(expect_errc(code, op, part), part));
}

class ReplicationTest : public FabricTest {
 protected:
  static smb::BufferOptions replicated() {
    smb::BufferOptions o;
    o.stripe_unit = kUnit;  // every server holds stripes of every buffer
    o.replicas = 2;
    return o;
  }
  // The server keeping `name`'s layout record (not replicated yet), as
  // libsmb finds it: xxh64 of the name over the sorted server addresses.
  std::size_t home_of(const std::string& name) {
    std::vector<std::string> sorted;
    for (int i = 0; i < server_count(); ++i) sorted.push_back(server(static_cast<std::size_t>(i)).address());
    std::sort(sorted.begin(), sorted.end());
    const auto& home = sorted[XXH64(name.data(), name.size(), 0x534d42) % sorted.size()];
    for (std::size_t i = 0; i < sorted.size(); ++i)
      if (server(i).address() == home) return i;
    return 0;
  }
  // A server whose loss leaves the buffer's layout reachable.
  std::size_t not_home_of(const std::string& name) { return (home_of(name) + 1) % 3; }
  smb::Client fresh_client() {
    smb::ClientOptions o = client_options(kTimeout);
    o.tolerate_unreachable = true;
    return smb::Client(o);
  }
  static ByteVec doubles(const std::vector<double>& v) {
    ByteVec out(v.size() * sizeof(double));
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  }
  static std::vector<double> as_doubles(const ByteVec& b) {
    std::vector<double> out(b.size() / sizeof(double));
    std::memcpy(out.data(), b.data(), b.size());
    return out;
  }
};

}  // namespace smb::test
