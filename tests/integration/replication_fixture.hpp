#pragma once
// The fixture of the replication and repair tests: a 3-server fabric, buffers
// with two copies of every stripe on small stripes (every server holds some).
#include "data.hpp"
#include "expect_error.hpp"
#include "fabric.hpp"
#include "process.hpp"

#include <smb/client.hpp>

#include <nlohmann/json.hpp>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>

namespace smb::test {

constexpr std::uint64_t kUnit = 4096;

// `op` fails with `code`, and its message says `part`.
template <class Op>
void expect_error(Op op, smb::Errc code, const std::string& part) {
  EXPECT_TRUE(mentions(expect_errc(code, op, part), part));
}

// `smbctl ARGS` running in the background (repair --watch), its output
// captured; killed when it goes out of scope.
class BackgroundSmbctl {
 public:
  explicit BackgroundSmbctl(const std::vector<std::string>& args) : log_(std::tmpfile(), &std::fclose) {
    if (!log_) throw std::runtime_error("no temporary file for smbctl's output");
    pid_ = spawn(smbctl_path(), args, fileno(log_.get()), fileno(log_.get()));
  }
  ~BackgroundSmbctl() { stop(); }
  BackgroundSmbctl(const BackgroundSmbctl&) = delete;
  BackgroundSmbctl& operator=(const BackgroundSmbctl&) = delete;

  // What it printed so far.
  std::string text() const {
    std::string out;
    std::rewind(log_.get());
    char chunk[4096];
    while (const auto n = std::fread(chunk, 1, sizeof chunk, log_.get())) out.append(chunk, n);
    return out;
  }
  // Waits up to 30 s for `done`; whether it came.
  static bool eventually(const std::function<bool()>& done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!done() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return done();
  }
  // Waits up to 30 s for `part` in its output.
  bool said(const std::string& part) const {
    return eventually([&] { return mentions(text(), part); });
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    wait_for_exit(pid_, std::chrono::seconds(10));
    pid_ = -1;
  }

 private:
  std::unique_ptr<FILE, int (*)(FILE*)> log_;
  pid_t pid_ = -1;
};

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
  // The holder's Buffer of `name` and a new client both read `values` back.
  void expect_values(smb::Buffer& holder, const std::string& name, const std::vector<double>& values,
                     const std::string& after) {
    ByteVec got(values.size() * sizeof(double));
    holder.read(0, got);
    EXPECT_EQ(as_doubles(got), values) << "the holder's read " << after;
    auto later = fresh_client();
    ByteVec seen(values.size() * sizeof(double));
    later.open(name).read(0, seen);
    EXPECT_EQ(as_doubles(seen), values) << "a new client's read " << after;
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
