#pragma once
// The fixture of the replication and repair tests: a 3-server fabric, buffers
// with two copies of every stripe on small stripes (every server holds some).
#include "data.hpp"
#include "expect_error.hpp"
#include "fabric.hpp"

#include <smb/client.hpp>

#include <nlohmann/json.hpp>

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
  // The home of `name` (the first keeper of its layout record), as libsmb
  // finds it: xxh64 of the name over the sorted server addresses.
  std::size_t home_of(const std::string& name) const {
    const auto sorted = sorted_addresses();
    return index_of(sorted[XXH64(name.data(), name.size(), 0x534d42) % sorted.size()]);
  }
  // The server `steps` after server `index` in sorted order (1: the other
  // keeper of a replicated buffer homed there).
  std::string keeper_after(std::size_t index, std::size_t steps) const {
    const auto sorted = sorted_addresses();
    const auto at = static_cast<std::size_t>(std::find(sorted.begin(), sorted.end(), addresses()[index]) - sorted.begin());
    return sorted[(at + steps) % sorted.size()];
  }
  // A server whose loss leaves the buffer's layout reachable.
  std::size_t not_home_of(const std::string& name) { return (home_of(name) + 1) % 3; }
  // The server that is neither `name`'s home nor `victim` (3 servers).
  std::size_t third(const std::string& name, std::size_t victim) const { return 3 - home_of(name) - victim; }
  smb::Client fresh_client() {
    smb::ClientOptions o = client_options(kTimeout);
    o.tolerate_unreachable = true;
    return smb::Client(o);
  }
  nlohmann::json json_of(const ToolResult& r) {
    auto doc = nlohmann::json::parse(r.out, nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << r.describe();
    return doc;
  }
  // The state smbctl info gives the buffer ("ok", "degraded: ...").
  std::string state_of(const std::string& name) { return json_of(run_smbctl({"--json", "info", name})).value("state", ""); }
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
