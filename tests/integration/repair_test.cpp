// Repair (Client::repair, smbctl repair): a server killed with SIGKILL and
// restarted empty gets its copies of replicated buffers back from the other
// copies (pulled server to server, or through the repairing client);
// afterwards the buffer survives losing the server that had served them
// meanwhile, vector ops keep both copies in one order, and clients that have
// the buffer open keep writing through the repair.
#include "raw_connection.hpp"
#include "replication_fixture.hpp"
#include "scoped_env.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <functional>
#include <memory>
#include <thread>

namespace {

using namespace smb::test;

// third(name, victim) (replication_fixture.hpp) is the server whose loss
// after a repair leaves some stripes only in the repaired copies.
class RepairTest : public ReplicationTest {};

TEST_P(RepairTest, ARestartedServerGetsItsCopiesBackAndTheBufferSurvivesTheNextLoss) {
  const std::uint64_t size = 3 * kUnit * 7 + 456;  // uneven shares, a partial last stripe
  const auto count = size / sizeof(double);
  std::vector<double> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<double>(i) * 0.5;
  {
    auto client = make_client();
    auto buffer = client.create("kt", size, replicated());
    buffer.write(0, doubles(values));
    buffer.apply(smb::VectorOp::accumulate, smb::DType::f64, 0, count, 1.0, doubles(std::vector<double>(count, 1.0)));
    for (auto& v : values) v += 1.0;
  }
  const auto victim = not_home_of("kt");
  restart_server(victim);
  EXPECT_TRUE(state_of("kt").starts_with("degraded")) << state_of("kt");

  const auto repair = run_smbctl({"--json", "repair", "kt"});
  ASSERT_EQ(repair.status.code, 0) << repair.describe();
  const auto doc = json_of(repair);
  ASSERT_EQ(doc["buffers"].size(), 1u) << repair.out;
  const auto& report = doc["buffers"][0];
  EXPECT_EQ(report.value("result", ""), "repaired") << repair.out;
  EXPECT_EQ(report["repaired"].size(), 2u) << "the server held copy 0 of one position and copy 1 of another\n"
                                           << repair.out;
  std::uint64_t bytes = 0;
  for (const auto& copy : report["repaired"]) {
    EXPECT_EQ(copy.value("server", ""), server(victim).address()) << repair.out;
    EXPECT_NE(copy.value("source", ""), server(victim).address()) << repair.out;
    // The restarted server pulls its copies itself, except where smbctl maps
    // both servers' memory (UCX shared memory: one host, a memcpy is faster).
    EXPECT_EQ(copy.value("server_to_server", false), GetParam().label != "ucx_shm") << repair.out;
    bytes += copy.value("bytes", 0ull);
  }
  EXPECT_EQ(report.value("bytes", 0ull), bytes);
  EXPECT_EQ(state_of("kt"), "ok");
  const auto again = run_smbctl({"repair", "kt"});
  EXPECT_EQ(again.status.code, 0) << again.describe();
  EXPECT_TRUE(mentions(again.out, "buffer 'kt': whole")) << again.out;

  // Vector ops after the repair: the repaired copy took its source's
  // version, so the ordered copy of each op follows at once (a copy left
  // behind would be dropped after a 5 s wait, and the read below would fail).
  auto client = fresh_client();
  auto buffer = client.open("kt");
  buffer.apply(smb::VectorOp::scale, smb::DType::f64, 0, count, 2.0);
  for (auto& v : values) v *= 2.0;
  // Losing the third server leaves some stripes only in the repaired copies.
  server(third("kt", victim)).kill();
  expect_values(buffer, "kt", values, "after the repair and the loss of another server");
}

// A client that keeps writing blocks and accumulating counters through a
// server's loss, its restart and a repair: the repair copies under its
// writes, pauses it only for the final pass, and it then writes the rebuilt
// copies too. Checked by losing the third server afterwards, which leaves
// some stripes only in the rebuilt copies: every acknowledged write and
// accumulate must be there, for the writer, the repairer and a fresh client.
// A buffer of one copy that lost its stripes on a restarted server cannot be
// repaired: smbctl repair says so, and exits as for a degraded fabric.
// SMB_REPAIR_COPY=client: the bytes pass through the repairing client (as
// where servers cannot reach each other), and the copies are as whole.
TEST_P(RepairTest, ARepairThroughTheClientRebuildsTheSameCopies) {
  const std::uint64_t size = 3 * kUnit * 5 + 100;
  const auto values = pattern_bytes(0, size, 9);
  {
    auto client = make_client();
    client.create("through", size, replicated()).write(0, values);
  }
  const auto victim = not_home_of("through");
  restart_server(victim);
  ScopedEnv env;
  env.set("SMB_REPAIR_COPY", "client");
  const auto repair = run_smbctl({"--json", "repair", "through"});
  ASSERT_EQ(repair.status.code, 0) << repair.describe();
  const auto doc = json_of(repair);
  ASSERT_EQ(doc["buffers"].size(), 1u) << repair.out;
  ASSERT_FALSE(doc["buffers"][0]["repaired"].empty()) << repair.out;
  for (const auto& copy : doc["buffers"][0]["repaired"])
    EXPECT_FALSE(copy.value("server_to_server", true)) << repair.out;
  EXPECT_EQ(state_of("through"), "ok");
  server(third("through", victim)).kill();  // some stripes now only in the rebuilt copies
  auto client = fresh_client();
  auto buffer = client.open("through");
  ByteVec got(size);
  buffer.read(0, got);
  EXPECT_TRUE(got == values) << "the copies rebuilt through the client differ from what was written";
}

TEST_P(RepairTest, ARepairOfEveryBufferNamesALostSingleCopyBuffer) {
  smb::BufferOptions one;
  one.stripe_unit = kUnit;  // every server holds stripes of it
  {
    auto client = make_client();
    client.create("single", 3 * kUnit * 4, one);
  }
  restart_server(not_home_of("single"));
  const auto repair = run_smbctl({"repair"});
  EXPECT_EQ(repair.status.code, 3) << "as for a degraded fabric\n" << repair.describe();
  EXPECT_TRUE(mentions(repair.out, "buffer 'single': lost")) << repair.describe();
  EXPECT_TRUE(mentions(repair.out, "no repair can rebuild")) << repair.describe();
  const auto doc = json_of(run_smbctl({"--json", "repair"}));
  ASSERT_EQ(doc["buffers"].size(), 1u) << doc.dump();
  EXPECT_EQ(doc["buffers"][0].value("result", ""), "lost") << doc.dump();
  EXPECT_TRUE(doc.value("degraded", false)) << doc.dump();
}

TEST_P(RepairTest, ClientsKeepWritingAndAccumulatingThroughARepair) {
  constexpr std::uint64_t kBlock = 3 * kUnit * 4;
  constexpr std::uint64_t kBlocks = 96;  // 4.5 MiB, so that the copy takes a while
  constexpr std::uint64_t kCounters = 3 * kUnit;  // f64 counters after the blocks
  constexpr std::uint64_t kCountersAt = kBlock * kBlocks;
  const std::string name = "live";
  auto worker = make_client();
  auto buffer = worker.create(name, kCountersAt + kCounters * sizeof(double), replicated());
  buffer.write(0, ByteVec(buffer.size(), std::byte{0}));

  std::vector<std::uint64_t> generation(kBlocks, 0);  // the last acknowledged write of each block
  std::uint64_t accumulated = 0;                      // acknowledged accumulates of +1 on every counter
  std::atomic<std::uint64_t> ops{0};
  std::atomic<bool> stop{false};
  std::string failure;
  std::thread writer([&] {
    const auto ones = doubles(std::vector<double>(kCounters, 1.0));
    try {
      for (std::uint64_t g = 1; !stop; ++g) {
        const auto b = g % kBlocks;
        buffer.write(b * kBlock, ByteVec(kBlock, static_cast<std::byte>(g % 251 + 1)));
        generation[b] = g;
        if (g % 4 == 0) {
          buffer.apply(smb::VectorOp::accumulate, smb::DType::f64, kCountersAt, kCounters, 1.0, ones);
          ++accumulated;
        }
        ++ops;
      }
    } catch (const smb::Error& e) {
      failure = e.what();
    }
  });
  const auto let_run = [&](std::uint64_t more) {
    const auto until = ops.load() + more;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (ops.load() < until && failure.empty() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  let_run(50);
  const auto victim = not_home_of(name);
  auto repairer = fresh_client();
  auto own = repairer.open(name);  // the repairing client's own Buffer is paused and adopts too
  // Each round loses the server and repairs it with the writer running; the
  // final pass must have had something to recopy at least once (the writer
  // wrote during the copy), which a few rounds make near certain.
  smb::RepairReport report;
  std::uint64_t recopied = 0;
  for (int round = 0; round < 3 && recopied == 0 && failure.empty(); ++round) {
    restart_server(victim);
    let_run(50);
    EXPECT_TRUE(state_of(name).starts_with("degraded")) << state_of(name);
    report = repairer.repair(name);
    recopied += report.recopied;
    EXPECT_EQ(report.repaired.size(), 2u);
    EXPECT_EQ(report.clients_paused, 2u) << "the writer's client and the repairer's own";
    EXPECT_LE(report.paused_seconds, report.seconds);
    EXPECT_EQ(state_of(name), "ok");
    let_run(50);  // writes and accumulates after the repair reach the rebuilt copies
  }
  stop = true;
  writer.join();
  ASSERT_EQ(failure, "") << "the writer failed";
  EXPECT_GT(recopied, 0u) << "no write landed during any of the copies";

  ByteVec expected(buffer.size());
  for (std::uint64_t b = 0; b < kBlocks; ++b)
    std::fill_n(expected.begin() + static_cast<std::ptrdiff_t>(b * kBlock), kBlock,
                generation[b] == 0 ? std::byte{0} : static_cast<std::byte>(generation[b] % 251 + 1));
  const auto counters = doubles(std::vector<double>(kCounters, static_cast<double>(accumulated)));
  std::copy(counters.begin(), counters.end(), expected.begin() + static_cast<std::ptrdiff_t>(kCountersAt));
  server(third(name, victim)).kill();
  for (auto* reader : {&buffer, &own}) {
    ByteVec got(buffer.size());
    reader->read(0, got);
    EXPECT_TRUE(got == expected) << (reader == &buffer ? "the writer's" : "the repairer's") << " read";
  }
  ByteVec got(buffer.size());
  fresh_client().open(name).read(0, got);
  EXPECT_TRUE(got == expected) << "a fresh client's read";
}

// What a repair cannot pause it does not finish: a holder that never
// answers (here a bare session that holds the buffer) fails it with busy,
// and the clients it paused go on unrepaired. Opens wait only while a
// pause runs; a repair runs one at a time; unreplicated buffers have none.
TEST_P(RepairTest, ARepairThatCannotPauseEveryHolderChangesNothing) {
  auto holder = make_client();
  auto held = holder.create("busy", 3 * kUnit * 2, replicated());
  held.write(0, pattern_bytes(0, held.size()));
  holder.create("single", 3 * kUnit);
  const auto victim = not_home_of("busy");
  restart_server(victim);
  const auto home = server(home_of("busy")).address();
  auto impatient = smb::Client(client_options(std::chrono::milliseconds(300)));
  expect_error([&] { impatient.repair("single"); }, smb::Errc::invalid_argument, "one copy");
  {
    RawConnection raw(home);
    raw.send(msgpack_frame(1, 1, {{"client", "test"}, {"transport", fabric_transport()}}));
    ASSERT_TRUE(raw.receive());
    raw.send(msgpack_frame(24, 2, {{"name", "busy"}}));  // hold_layout, and no watcher to answer a pause
    const auto hold = raw.receive();
    ASSERT_TRUE(hold && hold->body.contains("held")) << (hold ? hold->body.dump() : "no reply");
    expect_error([&] { impatient.repair("busy"); }, smb::Errc::busy, "did not pause");
    held.write(0, pattern_bytes(0, held.size(), 1));  // the holder paused by it goes on
    EXPECT_TRUE(state_of("busy").starts_with("degraded")) << "nothing changed";
  }
  // The bare session's end released its hold: now the repair goes through.
  auto repairer = fresh_client();
  const auto report = repairer.repair("busy");
  EXPECT_EQ(report.repaired.size(), 2u);
  EXPECT_EQ(report.clients_paused, 1u);
  EXPECT_EQ(state_of("busy"), "ok");

  {
    RawConnection raw(home);
    raw.send(msgpack_frame(1, 1, {{"client", "test"}, {"transport", fabric_transport()}}));
    ASSERT_TRUE(raw.receive());
    raw.send(msgpack_frame(22, 2, {{"name", "busy"}}));  // begin_repair
    ASSERT_TRUE(raw.receive());
    // A repair that copies does not hold up opens; one repair at a time.
    impatient.open("busy");
    expect_error([&] { repairer.repair("busy"); }, smb::Errc::busy, "being repaired by another client");
    // Its pause does (no holder but the writer's client, which pauses at once).
    raw.send(msgpack_frame(29, 3, {{"name", "busy"}, {"timeout_ms", 5000}}));  // pause_holders
    const auto paused = raw.receive();
    ASSERT_TRUE(paused && paused->body.contains("holders")) << (paused ? paused->body.dump() : "no reply");
    expect_error([&] { impatient.open("busy"); }, smb::Errc::busy, "final copy");
  }  // the session's end ends its repair and the pause
  ByteVec got(held.size());
  make_client().open("busy").read(0, got);
  EXPECT_TRUE(got == pattern_bytes(0, got.size(), 1)) << "the write made while the failed repair ran";
  held.read(0, got);
  EXPECT_TRUE(got == pattern_bytes(0, got.size(), 1));
}

// A repair skips its digest passes only where nobody can have written the
// buffer since it began: begin_repair says how many hold it, and the pause
// says whether anyone held it there since (an open and a close in between
// count: that client may have written).
TEST_P(RepairTest, ThePauseSaysWhetherAnyoneHeldTheBufferSinceTheRepairBegan) {
  make_client().create("quiet", 3 * kUnit * 2, replicated()).write(0, pattern_bytes(0, 3 * kUnit * 2));
  const auto home = server(home_of("quiet")).address();
  auto repair_by_hand = [&](const std::function<void()>& meanwhile) {
    RawConnection raw(home);
    raw.send(msgpack_frame(1, 1, {{"client", "test"}, {"transport", fabric_transport()}}));
    EXPECT_TRUE(raw.receive());
    raw.send(msgpack_frame(22, 2, {{"name", "quiet"}}));  // begin_repair
    const auto began = raw.receive();
    EXPECT_TRUE(began && began->body.contains("holders")) << (began ? began->body.dump() : "no reply");
    meanwhile();
    raw.send(msgpack_frame(29, 3, {{"name", "quiet"}, {"timeout_ms", 5000}}));  // pause_holders
    const auto paused = raw.receive();
    EXPECT_TRUE(paused && paused->body.contains("untouched")) << (paused ? paused->body.dump() : "no reply");
    return std::make_pair(began ? began->body : nlohmann::json{}, paused ? paused->body : nlohmann::json{});
  };  // the session's end ends its repair
  const auto [began, paused] = repair_by_hand([] {});
  EXPECT_EQ(began.value("holders", 9), 0) << began.dump();
  EXPECT_TRUE(paused.value("untouched", false)) << "nobody held it: " << paused.dump();

  const auto [began_again, paused_again] = repair_by_hand([&] {
    auto client = make_client();
    client.open("quiet").write(0, pattern_bytes(0, kUnit, 7));  // held, written, closed
  });
  EXPECT_EQ(began_again.value("holders", 9), 0) << began_again.dump();
  EXPECT_FALSE(paused_again.value("untouched", true)) << "a client held it meanwhile: " << paused_again.dump();

  auto holder = make_client();
  auto held = holder.open("quiet");
  const auto [began_held, paused_held] = repair_by_hand([] {});
  EXPECT_EQ(began_held.value("holders", 9), 1) << began_held.dump();
  EXPECT_FALSE(paused_held.value("untouched", true)) << paused_held.dump();
  EXPECT_EQ(paused_held.value("holders", 9), 1) << paused_held.dump();
}

// Where a keeper restarted, its pause cannot say whether anyone held the
// buffer; the copies' own servers say who has a copy open and how many
// times it was ever opened (segment_clients), so that a repair finding
// nobody then and the same count at its pause skips its digests. An open
// and close in between raises the count.
TEST_P(RepairTest, ACopysServerSaysWhoHasItOpenAndHowOftenItWasOpened) {
  make_client().create("counted", 3 * kUnit * 2, replicated()).write(0, pattern_bytes(0, 3 * kUnit * 2));
  RawConnection raw(server(home_of("counted")).address());
  raw.send(msgpack_frame(1, 1, {{"client", "test"}, {"transport", fabric_transport()}}));
  ASSERT_TRUE(raw.receive());
  std::uint32_t request = 2;
  auto users = [&] {
    raw.send(msgpack_frame(33, request++, {{"name", "counted"}}));  // segment_clients
    const auto reply = raw.receive();
    EXPECT_TRUE(reply && reply->body.contains("opens")) << (reply ? reply->body.dump() : "no reply");
    return reply ? reply->body : nlohmann::json{};
  };
  const auto before = users();
  EXPECT_TRUE(before["clients"].empty()) << before.dump();
  {
    auto client = make_client();
    auto buffer = client.open("counted");
    const auto open = users();
    EXPECT_EQ(open["clients"].size(), 1u) << open.dump();
    EXPECT_GT(open.value("opens", 0ull), before.value("opens", 0ull)) << open.dump();
  }
  const auto after = users();
  EXPECT_TRUE(after["clients"].empty()) << after.dump();
  EXPECT_GT(after.value("opens", 0ull), before.value("opens", 0ull)) << "opened and closed meanwhile: " << after.dump();
  EXPECT_EQ(users().value("opens", 0ull), after.value("opens", 1ull)) << "nobody opened it since";
}

// A replicated buffer's layout record is kept by its home and the next
// server: with the home killed, the buffer is still listed, opened, read and
// written; with the home restarted empty, a repair rebuilds its copies there
// and writes the record back, and the buffer then survives losing the
// other keeper too, down to its destroy.
TEST_P(RepairTest, ABufferSurvivesLosingTheHomeOfItsLayout) {
  const std::string name = "homeless";
  const std::size_t size = 3 * kUnit * 4;
  const auto home = home_of(name);
  const auto other_keeper = index_of(keeper_after(home, 1));

  auto writer = make_client();  // holds the buffer open through all of it
  auto held = writer.create(name, size, replicated());
  held.write(0, pattern_bytes(0, size));
  server(home).kill();
  {
    ByteVec got(size);
    fresh_client().open(name).read(0, got);
    EXPECT_TRUE(holds_pattern(got, 0)) << "opened through the other keeper";
    const auto listed = run_smbctl({"--json", "ls"});
    EXPECT_TRUE(mentions(listed.out, "\"" + name + "\"")) << listed.describe();
    EXPECT_TRUE(state_of(name).starts_with("degraded")) << state_of(name);
  }
  held.write(0, pattern_bytes(0, size, 1));
  restart_server(home);
  const auto report = fresh_client().repair(name);
  EXPECT_EQ(report.records_restored, std::vector<std::string>{server(home).address()});
  EXPECT_EQ(report.repaired.size(), 2u);
  EXPECT_EQ(report.clients_paused, 1u) << "the writer, through the keeper that stayed";
  EXPECT_EQ(state_of(name), "ok");
  held.write(0, pattern_bytes(0, size, 2));  // reaches the rebuilt copies: the writer adopted them
  server(other_keeper).kill();
  ByteVec got(size);
  fresh_client().open(name).read(0, got);
  EXPECT_TRUE(got == pattern_bytes(0, size, 2)) << "read through the written-back record";
  held.close();
  fresh_client().destroy(name);
  expect_error([&] { fresh_client().open(name); }, smb::Errc::not_found, "no buffer named");
}

// A keeper that missed a repair's end (unreachable but alive then) keeps
// the older runs; the next repair finds the keepers' records differ, takes
// each server's current run, and writes it back. Here the backup keeper is
// set back by hand (a bare session's begin_repair / end_repair with the
// runs from before); then the home is killed and the buffer opens whole
// through the backup (with its old record it would take the repaired
// server for restarted, and the stripes whose other copy was on the home
// for lost).
TEST_P(RepairTest, AKeeperLeftBehindIsBroughtUpToDate) {
  const std::string name = "behind";
  const std::size_t size = 3 * kUnit * 4;
  make_client().create(name, size, replicated()).write(0, pattern_bytes(0, size));
  const auto home = home_of(name);
  const auto backup = keeper_after(home, 1), third = keeper_after(home, 2);
  const auto victim = index_of(third);

  const auto before = fresh_client().info(name).instances;
  restart_server(victim);
  ASSERT_EQ(fresh_client().repair(name).repaired.size(), 2u);
  {
    RawConnection raw(backup);
    raw.send(msgpack_frame(1, 1, {{"client", "test"}, {"transport", fabric_transport()}}));
    ASSERT_TRUE(raw.receive());
    raw.send(msgpack_frame(22, 2, {{"name", name}}));  // begin_repair
    ASSERT_TRUE(raw.receive());
    raw.send(msgpack_frame(23, 3, {{"name", name}, {"instances", before}}));  // end_repair, with the old runs
    const auto ended = raw.receive();
    ASSERT_TRUE(ended && !ended->body.contains("error")) << (ended ? ended->body.dump() : "no reply");
  }
  const auto report = fresh_client().repair(name);
  EXPECT_TRUE(report.repaired.empty());
  EXPECT_EQ(report.records_restored, std::vector<std::string>{backup});
  server(home).kill();
  const auto state = state_of(name);
  EXPECT_TRUE(state.starts_with("degraded: copies on " + server(home).address() + " unreachable")) << state;
  EXPECT_FALSE(mentions(state, third)) << "the repaired server taken for restarted: " << state;
  ByteVec got(size);
  fresh_client().open(name).read(0, got);
  EXPECT_TRUE(holds_pattern(got, 0));
}

TEST_P(RepairTest, TheWatchModeRepairsAServerThatComesBack) {
  {
    auto client = make_client();
    client.create("auto", 3 * kUnit * 3, replicated()).write(0, pattern_bytes(0, 3 * kUnit * 3));
  }
  BackgroundSmbctl watcher({"--servers", server_list(), "repair", "--watch", "--interval", "0.2"});
  const auto victim = not_home_of("auto");
  // A server down is said once, and its return.
  server(victim).kill();
  EXPECT_TRUE(watcher.said("unreachable: " + server(victim).address())) << watcher.text();
  restart_server(victim);
  EXPECT_TRUE(watcher.said("every server is reachable again")) << watcher.text();
  BackgroundSmbctl::eventually([&] { return state_of("auto") == "ok"; });
  const auto text = watcher.text();
  watcher.stop();
  EXPECT_EQ(state_of("auto"), "ok") << text;
  EXPECT_TRUE(mentions(text, "buffer 'auto': repaired")) << text;
  // The repaired copies hold the data: lose the other servers' copies of them.
  server(third("auto", victim)).kill();
  ByteVec got(3 * kUnit * 3);
  fresh_client().open("auto").read(0, got);
  EXPECT_TRUE(holds_pattern(got, 0));
}

INSTANTIATE_TEST_SUITE_P(Fabrics, RepairTest, testing::ValuesIn(multi_server_fabrics()), fabric_name);

}  // namespace
