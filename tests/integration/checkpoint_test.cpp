// Checkpoints against real servers: a buffer saved to a file and loaded onto
// other servers comes back byte for byte; a damaged, truncated or foreign
// file, or a taken name, fails with a clear error and changes nothing; a
// save under concurrent vector ops holds the buffer at one version; the
// update engine resumes its global weights from a checkpoint; smbctl save
// and load do the same from the shell.
#include "data.hpp"
#include "expect_error.hpp"
#include "fabric.hpp"

#include <smb/client.hpp>
#include <smb/update_engine.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <thread>

namespace {

using namespace smb::test;
namespace fs = std::filesystem;

class CheckpointTest : public FabricTest {
 protected:
  void SetUp() override {
    FabricTest::SetUp();
    dir_ = fs::temp_directory_path() / ("smb-checkpoint-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::remove_all(dir_);
    FabricTest::TearDown();
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  // Elements are compared as T: float for f32, the raw bits for f16.
  template <class T>
  void save_while_adding(smb::Client& client, const std::function<void(int)>& add_one, T all_added,
                         bool may_give_up);

  // A file holding `from` with `edit` applied to its bytes.
  std::string damaged(const std::string& from, const std::string& name, void (*edit)(std::string&)) const {
    std::ifstream in(from, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    edit(bytes);
    std::ofstream(file(name), std::ios::binary) << bytes;
    return file(name);
  }

  static smb::BufferOptions striped(std::uint64_t unit, std::vector<std::string> servers = {}) {
    smb::BufferOptions o;
    o.stripe_unit = unit;
    o.servers = std::move(servers);
    return o;
  }

  fs::path dir_;
};

TEST_P(CheckpointTest, SavedBufferLoadsBackOntoOtherServers) {
  auto client = make_client();
  const std::uint64_t size = 5 * 65536 + 13;
  auto original = client.create("model", size, striped(65536));
  original.write(0, pattern_bytes(0, size, 0x21));
  const auto saved = client.save("model", file("model.ckpt"));
  EXPECT_EQ(saved.name, "model");
  EXPECT_EQ(saved.size, size);
  EXPECT_EQ(saved.stripe_unit, 65536u);
  EXPECT_FALSE(fs::exists(file("model.ckpt.partial"))) << "the partial file must be gone once the file is whole";
  const auto read_back = smb::read_checkpoint(file("model.ckpt"));
  EXPECT_EQ(read_back.checksum, saved.checksum);
  EXPECT_EQ(read_back.version, saved.version);

  // Its data, without any server (how the update engine resumes); a
  // destination of another size is refused, naming both sizes.
  ByteVec data(size);
  EXPECT_EQ(smb::read_checkpoint(file("model.ckpt"), std::as_writable_bytes(std::span(data))).checksum, saved.checksum);
  EXPECT_TRUE(same_bytes(pattern_bytes(0, size, 0x21), data));
  ByteVec short_by_one(size - 1);
  const std::string refused = expect_errc(
      smb::Errc::invalid_argument,
      [&] { smb::read_checkpoint(file("model.ckpt"), std::as_writable_bytes(std::span(short_by_one))); },
      "a checkpoint read into a destination one byte short");
  EXPECT_TRUE(mentions(refused, std::to_string(size) + " bytes")) << refused;
  EXPECT_TRUE(mentions(refused, "takes " + std::to_string(size - 1))) << refused;

  // Onto one server with another stripe unit, and as saved.
  auto onto_one = client.load(file("model.ckpt"), "model-on-one", striped(4096, {server(server_count() - 1).address()}));
  EXPECT_EQ(onto_one.layout().servers.size(), 1u);
  auto as_saved = client.load(file("model.ckpt"), "model-as-saved");
  EXPECT_EQ(as_saved.layout().stripe_unit, 65536u);
  EXPECT_EQ(as_saved.layout().servers.size(), static_cast<std::size_t>(server_count()));
  for (auto* b : {&onto_one, &as_saved}) {
    ByteVec got(size);
    make_client().open(b->name()).read(0, got);
    EXPECT_TRUE(same_bytes(pattern_bytes(0, size, 0x21), got)) << b->name();
  }
}

TEST_P(CheckpointTest, DamagedFilesAndTakenNamesChangeNothing) {
  auto client = make_client();
  const std::uint64_t size = 3 * 4096 + 5;
  client.create("w", size, striped(4096)).write(0, pattern_bytes(0, size, 0x5));
  const std::string good = file("w.ckpt");
  client.save("w", good);

  const std::vector<std::pair<std::string, std::string>> cases = {
      {damaged(good, "flipped", [](std::string& b) { b[b.size() / 2] ^= 0x40; }), "checksum mismatch"},
      {damaged(good, "short", [](std::string& b) { b.pop_back(); }), "truncated or damaged"},
      {damaged(good, "longer", [](std::string& b) { b.push_back('x'); }), "truncated or damaged"},
      {damaged(good, "stub", [](std::string& b) { b.resize(10); }), "truncated"},
      {damaged(good, "foreign", [](std::string& b) { b[0] = 'X'; }), "not an smb checkpoint"},
      {damaged(good, "trailer", [](std::string& b) { b.back() = '?'; }), "damaged trailer"},
      {file("absent"), "cannot open"}};
  for (const auto& [path, why] : cases) {
    const auto text = expect_errc(smb::Errc::invalid_argument, [&] { client.load(path, "restored"); }, path);
    EXPECT_TRUE(mentions(text, why));
    EXPECT_TRUE(mentions(text, path));
    expect_errc(smb::Errc::not_found, [&] { client.open("restored"); }, "a failed load must leave no buffer");
  }

  // A taken name: already_exists, and the buffer there keeps its bytes.
  client.create("taken", size).write(0, pattern_bytes(0, size, 0x77));
  expect_errc(smb::Errc::already_exists, [&] { client.load(good, "taken"); }, "load onto a taken name");
  ByteVec got(size);
  client.open("taken").read(0, got);
  EXPECT_TRUE(same_bytes(pattern_bytes(0, size, 0x77), got));
}

// Saves run again and again while `add_one(i)` runs kAdds times in another
// thread, each time adding 1 to every element of "busy" (1 MiB over every
// server): a snapshot at one version holds the same value everywhere. Every
// file written must be untorn, and the last, taken once the adds are done,
// hold all of them. `may_give_up`: a save may end with timeout (and leave no
// file) while the buffer never stays still for a whole read.
struct ConcurrentSaves {
  static constexpr std::uint64_t kFloats = 1 << 18;
  static constexpr int kAdds = 40;
};

template <class T>
void CheckpointTest::save_while_adding(smb::Client& client, const std::function<void(int)>& add_one, T all_added,
                                       bool may_give_up) {
  using C = ConcurrentSaves;
  std::atomic<bool> done{false};
  std::thread adder([&] {
    for (int i = 0; i < C::kAdds; ++i) {
      add_one(i);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    done = true;
  });
  std::vector<std::pair<std::string, smb::CheckpointInfo>> saved;
  int gave_up = 0;
  try {
    for (int i = 0; !done; ++i) {
      const auto path = file("busy-" + std::to_string(i) + ".ckpt");
      try {
        saved.emplace_back(path, client.save("busy", path));
      } catch (const smb::Error& e) {
        if (!may_give_up || e.code() != smb::Errc::timeout) throw;
        ++gave_up;
        EXPECT_FALSE(fs::exists(path)) << "a save that gave up left " << path;
      }
    }
  } catch (...) {
    adder.join();
    throw;
  }
  adder.join();
  saved.emplace_back(file("busy-last.ckpt"), client.save("busy", file("busy-last.ckpt")));
  std::size_t during = 0;
  for (const auto& [path, info] : saved) {
    auto loaded = client.load(path, "busy-copy");
    std::vector<T> values(loaded.size() / sizeof(T));
    loaded.read(0, std::as_writable_bytes(std::span(values)));
    std::size_t off = 0;
    for (T v : values) off += v != values.front();
    EXPECT_EQ(off, 0u) << path << " is torn: " << off << " elements differ from the first, " << +values.front()
                       << " (last: " << +values.back() << ", saved at version " << info.version << ")";
    during += values.front() != T{} && values.front() != all_added;
    if (path == saved.back().first) {
      EXPECT_EQ(values.front(), all_added) << "the last save";
    }
    loaded.close();
    client.destroy("busy-copy");
  }
  std::cout << "saves while adding: " << during << " of " << saved.size() << " between the first and last add, "
            << gave_up << " gave up\n";
}

TEST_P(CheckpointTest, SaveHoldsOffWritersThatTakeTheLock) {
  auto client = make_client();
  auto buffer = client.create("busy", ConcurrentSaves::kFloats * sizeof(float), striped(65536));
  buffer.write(0, ByteVec(ConcurrentSaves::kFloats * sizeof(float)));
  auto own = make_client();
  auto b = own.open("busy");
  const std::vector<float> ones(ConcurrentSaves::kFloats, 1.0f);
  save_while_adding<float>(
      client,
      [&](int) {
        auto held = own.lock("busy");  // as the guarantee asks of writers (docs/reliability.md)
        b.apply(smb::VectorOp::accumulate, smb::DType::f32, 0, ConcurrentSaves::kFloats, 1.0,
                std::as_bytes(std::span(ones)));
        held.unlock();
      },
      static_cast<float>(ConcurrentSaves::kAdds), /*may_give_up=*/false);
}

// Writers that do not lock, such as the update engine's exchanges: a server
// answers a version read only between ops, so an op that runs on a server
// for the whole read is seen. The ops take x from a buffer on the same
// servers, so each is one call per server on every transport, and add f16
// values, whose conversions make an op take longer than reading the buffer:
// without that answer, saves on one server come out torn.
TEST_P(CheckpointTest, SaveIsUntornUnderLocklessVectorOps) {
  constexpr std::uint16_t kZero = 0, kOne = 0x3C00, kForty = 0x5100;  // f16 bits of 0, 1 and 40
  static_assert(ConcurrentSaves::kAdds == 40);
  auto client = make_client();
  const std::uint64_t count = 2 * ConcurrentSaves::kFloats;  // 1 MiB of f16
  auto buffer = client.create("busy", count * 2, striped(65536));
  const std::vector<std::uint16_t> zeros(count, kZero), one_values(count, kOne);
  buffer.write(0, std::as_bytes(std::span(zeros)));
  auto ones = client.create("ones", count * 2, striped(65536));
  ones.write(0, std::as_bytes(std::span(one_values)));
  auto own = make_client();
  auto b = own.open("busy");
  auto x = own.open("ones");
  save_while_adding<std::uint16_t>(
      client, [&](int) { b.apply_from(smb::VectorOp::accumulate, smb::DType::f16, 0, count, 1.0, x, 0); }, kForty,
      /*may_give_up=*/true);
}

TEST_P(CheckpointTest, TheEngineResumesItsGlobalWeights) {
  auto client = make_client();
  smb::EngineConfig config;
  config.name = "run1";
  config.parameters = 1000;
  config.mode = smb::UpdateMode::synchronous;
  std::vector<float> params(config.parameters);
  for (std::size_t i = 0; i < params.size(); ++i) params[i] = 0.5f * static_cast<float>(i);
  {
    smb::UpdateEngine engine(client, config);
    engine.initialize(params);
    for (auto& p : params) p += 1.0f;
    engine.after_step(params);  // tau 1, one group: the global weights are these now
    engine.save_checkpoint(file("run1.ckpt"));
  }
  config.name = "run2";
  config.resume_from = file("run1.ckpt");
  smb::UpdateEngine resumed(client, config);
  std::vector<float> fresh(config.parameters, -7.0f);
  resumed.initialize(fresh);
  EXPECT_EQ(fresh, params) << "initialize must start from the checkpoint's weights";

  config.name = "run3";
  config.parameters = 999;
  smb::UpdateEngine wrong(client, config);
  std::vector<float> small(config.parameters);
  const auto text = expect_errc(smb::Errc::invalid_argument, [&] { wrong.initialize(small); }, "a size mismatch");
  EXPECT_TRUE(mentions(text, "999 parameters"));
}

TEST_P(CheckpointTest, SmbctlSavesAndLoads) {
  auto client = make_client();
  client.create("cli", 4096 * 3).write(0, pattern_bytes(0, 4096 * 3, 0x3));
  const auto s = run_smbctl({"save", "cli", file("cli.ckpt")});
  ASSERT_TRUE(s.status.success()) << s.describe();
  EXPECT_TRUE(mentions(s.out, "saved buffer 'cli'"));
  const auto l = run_smbctl({"--json", "load", file("cli.ckpt"), "cli-copy"});
  ASSERT_TRUE(l.status.success()) << l.describe();
  EXPECT_EQ(nlohmann::json::parse(l.out).value("loaded_as", ""), "cli-copy") << l.out;
  ByteVec got(4096 * 3);
  client.open("cli-copy").read(0, got);
  EXPECT_TRUE(same_bytes(pattern_bytes(0, 4096 * 3, 0x3), got));
  const auto again = run_smbctl({"load", file("cli.ckpt"), "cli-copy"});
  EXPECT_EQ(again.status.code, 1) << again.describe();
  EXPECT_TRUE(mentions(again.err, "already"));
  EXPECT_TRUE(mentions(again.err, "smbctl rm")) << "says what to do: " << again.describe();
}

INSTANTIATE_TEST_SUITE_P(Fabrics, CheckpointTest, testing::ValuesIn(all_fabrics()), fabric_name);

}  // namespace
