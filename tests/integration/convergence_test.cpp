// Training through the update engine converges: softmax regression on a
// deterministic 10-class problem (64 features, like 8x8 digits), 4 workers in
// 2 groups (hybrid: allreduce inside a group, the engine's mode between
// groups), against one worker training alone on all the data.
#include "fabric.hpp"
#include "smbd_process.hpp"

#include <smb/update_engine.hpp>

#include <gtest/gtest.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <random>
#include <thread>
#include <vector>

namespace {

using namespace smb::test;

constexpr int kClasses = 10, kFeatures = 64;
constexpr std::size_t kParams = kClasses * kFeatures + kClasses;
constexpr int kBatch = 16, kEpochs = 6;
constexpr float kLearningRate = 0.05f;

struct Dataset {
  std::vector<float> x;  // samples x kFeatures
  std::vector<int> y;
  std::size_t size() const { return y.size(); }
};

// Gaussian clusters around fixed random class means: separable but noisy.
void make_data(Dataset& train, Dataset& test) {
  std::mt19937 rng(7);
  std::normal_distribution<float> unit(0, 1);
  std::vector<float> means(kClasses * kFeatures);
  for (auto& m : means) m = unit(rng);
  auto sample = [&](Dataset& d, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      const int c = static_cast<int>(i % kClasses);
      for (int f = 0; f < kFeatures; ++f) d.x.push_back(means[static_cast<std::size_t>(c * kFeatures + f)] + 3.0f * unit(rng));
      d.y.push_back(c);
    }
  };
  sample(train, 2000);
  sample(test, 600);
}

// Softmax-regression gradient of the mean loss over samples [first, first+n) of `d`.
void gradient(const std::vector<float>& w, const Dataset& d, std::size_t first, std::size_t n, std::vector<float>& g) {
  std::fill(g.begin(), g.end(), 0.0f);
  const float* bias = w.data() + kClasses * kFeatures;
  for (std::size_t s = first; s < first + n; ++s) {
    const float* x = d.x.data() + s * kFeatures;
    float logits[kClasses];
    float top = -1e30f;
    for (int c = 0; c < kClasses; ++c) {
      float z = bias[c];
      for (int f = 0; f < kFeatures; ++f) z += w[static_cast<std::size_t>(c * kFeatures + f)] * x[f];
      logits[c] = z;
      top = std::max(top, z);
    }
    float total = 0;
    for (auto& z : logits) total += (z = std::exp(z - top));
    for (int c = 0; c < kClasses; ++c) {
      const float delta = (logits[c] / total - (d.y[s] == c ? 1.0f : 0.0f)) / static_cast<float>(n);
      for (int f = 0; f < kFeatures; ++f) g[static_cast<std::size_t>(c * kFeatures + f)] += delta * x[f];
      g[static_cast<std::size_t>(kClasses * kFeatures + c)] += delta;
    }
  }
}

double accuracy(const std::vector<float>& w, const Dataset& d) {
  int right = 0;
  for (std::size_t s = 0; s < d.size(); ++s) {
    const float* x = d.x.data() + s * kFeatures;
    int best = 0;
    float best_z = -1e30f;
    for (int c = 0; c < kClasses; ++c) {
      float z = w[static_cast<std::size_t>(kClasses * kFeatures + c)];
      for (int f = 0; f < kFeatures; ++f) z += w[static_cast<std::size_t>(c * kFeatures + f)] * x[f];
      if (z > best_z) best_z = z, best = c;
    }
    right += best == d.y[s] ? 1 : 0;
  }
  return static_cast<double>(right) / static_cast<double>(d.size());
}

// Local SGD over samples [first, last) of `d`, batch by batch; `sync`
// (allreduce + optimizer step + engine) is called once per batch.
template <class Step>
void train_epochs(const Dataset& d, std::size_t first, std::size_t last, std::vector<float>& w, Step step) {
  std::vector<float> g(kParams);
  for (int e = 0; e < kEpochs; ++e)
    for (std::size_t s = first; s + kBatch <= last; s += kBatch) {
      gradient(w, d, s, kBatch, g);
      step(w, g);
    }
}

// The reference: one worker training alone on all the data.
double one_worker_accuracy(const Dataset& train, const Dataset& test) {
  std::vector<float> alone(kParams, 0.01f);
  train_epochs(train, 0, train.size(), alone, [](std::vector<float>& w, std::vector<float>& g) {
    for (std::size_t i = 0; i < kParams; ++i) w[i] -= kLearningRate * g[i];
  });
  return accuracy(alone, test);
}

// The server keeping a name's records (layouts, barriers), as libsmb finds it.
std::string home_of(const std::string& name, const std::vector<std::string>& sorted_servers) {
  return sorted_servers[XXH64(name.data(), name.size(), 0x534d42) % sorted_servers.size()];
}

class ConvergenceTest : public FabricTest {
 protected:
  struct Run {
    std::string name;
    smb::UpdateMode mode = smb::UpdateMode::seasgd;
    int groups = 2, group_size = 2;
    std::uint32_t replicas = 1;
    std::atomic<int>* steps = nullptr;  // counts every worker's steps, when given
    std::chrono::microseconds pause{0};  // after each step: a test's events then fall mid-run
    // With `hold`, workers wait at step `hold_at` (of all workers' steps)
    // while it is true: a test's events then come before the run ends,
    // however slow the machine.
    std::atomic<bool>* hold = nullptr;
    int hold_at = 0;
  };
  // Trains groups x group_size workers; returns the accuracy of the global weights.
  double train_workers(const Run& run, const Dataset& train, const Dataset& test) {
    const int workers_in_all = run.groups * run.group_size;
    std::vector<std::thread> workers;
    std::vector<std::string> errors(static_cast<std::size_t>(workers_in_all));
    std::vector<float> final_weights(kParams);
    for (int rank = 0; rank < workers_in_all; ++rank)
      workers.emplace_back([&, rank] {
        try {
          auto client = make_client();
          smb::EngineConfig config;
          config.name = run.name;
          config.parameters = kParams;
          config.groups = static_cast<std::uint32_t>(run.groups);
          config.group = static_cast<std::uint32_t>(rank / run.group_size);
          config.group_size = static_cast<std::uint32_t>(run.group_size);
          config.group_rank = static_cast<std::uint32_t>(rank % run.group_size);
          config.mode = run.mode;
          config.alpha = 0.5;
          config.replicas = run.replicas;
          config.timeout = std::chrono::seconds(60);
          smb::UpdateEngine engine(client, config);
          std::vector<float> w(kParams, 0.0f);
          if (rank == 0) std::fill(w.begin(), w.end(), 0.01f);  // the first worker's start is everyone's
          engine.initialize(w);
          const std::size_t shard = train.size() / static_cast<std::size_t>(workers_in_all);
          train_epochs(train, shard * static_cast<std::size_t>(rank), shard * static_cast<std::size_t>(rank + 1), w,
                       [&](std::vector<float>& weights, std::vector<float>& g) {
                         engine.allreduce(g);
                         const float rate = kLearningRate * static_cast<float>(workers_in_all) / 2;
                         for (std::size_t i = 0; i < kParams; ++i) weights[i] -= rate * g[i];
                         engine.after_step(weights);
                         if (run.steps != nullptr) ++*run.steps;
                         if (run.pause.count() > 0) std::this_thread::sleep_for(run.pause);
                         while (run.hold != nullptr && *run.hold && run.steps != nullptr && *run.steps >= run.hold_at)
                           std::this_thread::sleep_for(std::chrono::milliseconds(1));
                       });
          if (rank == 0) engine.global_weights(final_weights);
          client.barrier(run.name + "/done", static_cast<std::uint32_t>(workers_in_all), std::chrono::seconds(60));
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(rank)] = e.what();
        }
      });
    for (auto& t : workers) t.join();
    for (const auto& e : errors) EXPECT_EQ(e, "");
    return accuracy(final_weights, test);
  }
};

TEST_P(ConvergenceTest, FourWorkersInTwoGroupsReachTheAccuracyOfOne) {
  Dataset train, test;
  make_data(train, test);
  const double baseline = one_worker_accuracy(train, test);
  ASSERT_GT(baseline, 0.5) << "the reference training itself does not learn";
  constexpr double kTolerance = 0.05;  // accuracy points the distributed runs may lose
  for (auto mode : {smb::UpdateMode::seasgd, smb::UpdateMode::downpour, smb::UpdateMode::synchronous}) {
    const double got = train_workers({"engine-" + std::to_string(static_cast<int>(mode)), mode}, train, test);
    EXPECT_GE(got, baseline - kTolerance) << "mode " << static_cast<int>(mode) << ": " << got << " vs one worker's "
                                          << baseline;
    std::printf("[ accuracy ] mode %d: %.3f (one worker: %.3f)\n", static_cast<int>(mode), got, baseline);
  }
}

// The pipelined exchanges work in chunks of two 1 MiB stripes on every server
// (EngineCore::chunk_floats): parameters spanning two chunks and part of a
// third.
std::uint64_t floats_over_chunks(int servers) { return 2 * 2 * 256 * 1024 * static_cast<std::uint64_t>(servers) + 1000; }

// The synchronous exchange is pipelined by chunks with per-chunk counters
// (engine_sync_exchange.cpp): with parameters spanning several chunks and a
// partial last one, four groups' exchanges give every group, and the global
// weights, exactly the mean (a power of two of groups: W/4 is exact in
// floats) -- three times in a row, so that both alternating sums and the
// growing counters are used again.
TEST_P(ConvergenceTest, SynchronousExchangeAveragesEveryChunkExactly) {
  const std::uint64_t kFloats = floats_over_chunks(server_count());
  constexpr int kGroups = 4, kExchanges = 3;
  std::vector<std::thread> workers;
  std::vector<std::string> errors(kGroups);
  for (int g = 0; g < kGroups; ++g)
    workers.emplace_back([&, g] {
      try {
        auto client = make_client();
        smb::EngineConfig config;
        config.name = "sync-chunks";
        config.parameters = kFloats;
        config.groups = kGroups;
        config.group = static_cast<std::uint32_t>(g);
        config.mode = smb::UpdateMode::synchronous;
        config.timeout = std::chrono::seconds(60);
        smb::UpdateEngine engine(client, config);
        std::vector<float> w(kFloats, 0.0f);
        engine.initialize(w);
        for (int e = 0; e < kExchanges; ++e) {
          // Group g holds 2g + i % 7 + e: the mean is 3 + i % 7 + e.
          for (std::uint64_t i = 0; i < kFloats; ++i) w[i] = static_cast<float>(g * 2 + i % 7 + e);
          engine.after_step(w);
          for (std::uint64_t i = 0; i < kFloats; ++i)
            if (w[i] != static_cast<float>(3 + i % 7 + e))
              throw std::runtime_error("exchange " + std::to_string(e) + ", group " + std::to_string(g) +
                                       ": element " + std::to_string(i) + " is " + std::to_string(w[i]));
        }
        std::vector<float> global(kFloats);
        engine.global_weights(global);
        for (std::uint64_t i = 0; i < kFloats; ++i)
          if (global[i] != static_cast<float>(3 + i % 7 + kExchanges - 1))
            throw std::runtime_error("global weight " + std::to_string(i) + " is " + std::to_string(global[i]));
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(g)] = e.what();
      }
    });
  for (auto& t : workers) t.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

// SEASGD is pipelined by chunks too (engine_seasgd_exchange.cpp): each
// chunk's read of the global weights waits for the previous exchange's push
// of that chunk, and the push adds dW with the call. Over several chunks and
// exchanges the weights and the global weights follow the unpipelined
// recurrence exactly (alpha 1/2 on small integers: exact in floats):
//   dW = alpha (W - Wg);  W -= dW;  Wg += dW.
TEST_P(ConvergenceTest, SeasgdExchangeFollowsTheRecurrenceInEveryChunk) {
  const std::uint64_t kFloats = floats_over_chunks(server_count());
  constexpr int kExchanges = 4;
  auto client = make_client();
  smb::EngineConfig config;
  config.name = "seasgd-chunks";
  config.parameters = kFloats;
  config.mode = smb::UpdateMode::seasgd;
  config.alpha = 0.5;
  config.timeout = std::chrono::seconds(60);
  smb::UpdateEngine engine(client, config);
  std::vector<float> w(kFloats, 0.0f), wg(kFloats, 0.0f);
  engine.initialize(w);
  for (int e = 0; e < kExchanges; ++e) {
    for (std::uint64_t i = 0; i < kFloats; ++i) w[i] = static_cast<float>(i % 7 + 4 * e);
    std::vector<float> expected = w;
    for (std::uint64_t i = 0; i < kFloats; ++i) {
      const float dw = 0.5f * (expected[i] - wg[i]);
      expected[i] -= dw;
      wg[i] += dw;
    }
    engine.after_step(w);  // its push goes on while the next exchange reads
    for (std::uint64_t i = 0; i < kFloats; ++i)
      ASSERT_EQ(w[i], expected[i]) << "exchange " << e << ", element " << i;
  }
  std::vector<float> global(kFloats);
  engine.global_weights(global);
  for (std::uint64_t i = 0; i < kFloats; ++i) ASSERT_EQ(global[i], wg[i]) << "global weight " << i;
}

// EngineConfig::replicas = 2: two groups of one train with seasgd while the
// memory server holding the first copy of the global weights is killed
// (SIGKILL) mid-run; both finish without an error and reach the accuracy of
// one worker. (The final barrier's home server is kept alive: barriers are
// not replicated.)
TEST_P(ConvergenceTest, TrainingGoesOnWhenAMemoryServerIsKilled) {
  Dataset train, test;
  make_data(train, test);
  const double baseline = one_worker_accuracy(train, test);
  // The weights (650 floats, one stripe) have copy 0 on the first server in
  // sorted order: that one dies. A name whose final barrier lives elsewhere:
  const auto sorted = sorted_addresses();
  std::string name;
  for (int k = 0; name.empty() || home_of(name + "/done", sorted) == sorted[0]; ++k) name = "replicated-" + std::to_string(k);
  const auto victim = index_of(sorted[0]);

  constexpr int kWorkers = 2;
  std::atomic<int> steps{0};
  double got = 0;
  std::thread training([&] { got = train_workers({name, smb::UpdateMode::seasgd, kWorkers, 1, 2, &steps}, train, test); });
  const int total = kWorkers * kEpochs * static_cast<int>(train.size() / kWorkers / kBatch);
  // (A worker that fails stops counting: the wait ends at the time limit.)
  for (int i = 0; i < 60000 && steps < total / 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  server(victim).kill();
  const int killed_at = steps;
  training.join();  // every worker finished without an error (train_workers checks)
  EXPECT_GT(steps.load(), killed_at) << "no step after the kill";
  EXPECT_GE(got, baseline - 0.05) << got << " vs one worker's " << baseline;
  std::printf("[ accuracy ] 2 copies, a server killed at step %d of %d: %.3f (one worker: %.3f)\n", killed_at, total,
              got, baseline);
}

// The same run through the whole of a loss: the server holding the first
// copy of the global weights is killed, restarted empty and repaired while
// the workers train (online repair: both workers are paused only for its
// final pass), then the server that held the other copy is killed too, so
// that the weights live only in the rebuilt copy; the run finishes at the
// accuracy of one worker. The layout's home and the final barrier's are
// kept on servers that stay (the layout is repaired through its home;
// barriers are not replicated).
// The second loss comes as soon as the repair returns, while the workers may
// still be opening the rebuilt copy (a new RDMA connection takes a while in
// the soft-RoCE VM): a read that finds no copy then waits for that.
TEST_P(ConvergenceTest, TrainingGoesOnThroughARepairAndASecondLoss) {
  Dataset train, test;
  make_data(train, test);
  const double baseline = one_worker_accuracy(train, test);
  const auto sorted = sorted_addresses();
  // The weights (one stripe): copy 0 on sorted[0] (restarted), copy 1 on sorted[1] (lost after the repair).
  std::string name;
  for (int k = 0; name.empty() || home_of(name + "/global", sorted) == sorted[0] ||
                  home_of(name + "/done", sorted) == sorted[1];
       ++k)
    name = "repaired-" + std::to_string(k);
  const auto victim = index_of(sorted[0]), second = index_of(sorted[1]);

  constexpr int kWorkers = 2;
  const int total = kWorkers * kEpochs * static_cast<int>(train.size() / kWorkers / kBatch);
  const int hold_at = total * 4 / 5;  // the workers wait there until the second loss
  std::atomic<int> steps{0};
  std::atomic<bool> hold{true};
  double got = 0;
  std::thread training([&] {
    got = train_workers(
        {name, smb::UpdateMode::seasgd, kWorkers, 1, 2, &steps, std::chrono::microseconds(2000), &hold, hold_at}, train,
        test);
  });
  const auto reach = [&](int count) {
    count = std::min(count, hold_at);
    for (int i = 0; i < 120000 && steps < count; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  reach(total / 5);
  server(victim).kill();
  reach(steps + 10);
  restart_server(victim);
  const int repair_began = steps;
  smb::ClientOptions options = client_options(kTimeout);
  options.tolerate_unreachable = true;
  smb::Client repairer(options);
  smb::RepairReport report;
  try {
    report = repairer.repair(name + "/global");
  } catch (const smb::Error& e) {
    ADD_FAILURE() << e.what();
  }
  const int repair_ended = steps;
  EXPECT_EQ(report.repaired.size(), 1u);
  EXPECT_EQ(report.clients_paused, static_cast<std::uint64_t>(kWorkers));
  reach(steps + 10);
  server(second).kill();
  const int second_loss = steps;
  hold = false;
  training.join();  // every worker finished without an error (train_workers checks)
  EXPECT_GT(steps.load(), second_loss) << "no step after the second loss";
  EXPECT_GE(got, baseline - 0.05) << got << " vs one worker's " << baseline;
  std::printf("[ accuracy ] 2 copies, repaired during steps %d-%d (paused %.1f ms), the other copy lost at step %d of "
              "%d: %.3f (one worker: %.3f)\n",
              repair_began, repair_ended, report.paused_seconds * 1000, second_loss, total, got, baseline);
}

// Groups with servers of their own (EngineConfig::group_servers, e.g. an
// smbd on each node): each group averages through its own server, exactly,
// and its buffers live there, not on the fabric's servers; the global
// weights stay on the fabric's. The groups' servers serve UCX (shared memory
// on a node) whatever the fabric's transport is, as a node would across
// hosts on tcp (EngineConfig::group_transport; on a UCX fabric the default,
// the client's transport, is what picks it).
TEST_P(ConvergenceTest, GroupsAverageOnTheirOwnServers) {
  if (fabric_transport() == "verbs")
    GTEST_SKIP() << "the groups' own servers are started on loopback, where verbs has no RDMA device";
  constexpr int kGroups = 2, kMembers = 2;
  constexpr std::uint64_t kFloats = 1000;
  const std::string group_transport = fabric_transport() == "ucx" ? "" : "ucx";
  SmbdOptions group_daemon;  // smbd's default transport: ucx
  std::vector<std::unique_ptr<SmbdProcess>> group_servers;
  for (int g = 0; g < kGroups; ++g) group_servers.push_back(std::make_unique<SmbdProcess>(group_daemon));
  std::vector<std::thread> workers;
  std::vector<std::string> errors(kGroups * kMembers);
  for (int g = 0; g < kGroups; ++g)
    for (int m = 0; m < kMembers; ++m)
      workers.emplace_back([&, g, m] {
        try {
          auto client = make_client();
          smb::EngineConfig config;
          config.name = "own-groups";
          config.parameters = kFloats;
          config.groups = kGroups;
          config.group = static_cast<std::uint32_t>(g);
          config.group_size = kMembers;
          config.group_rank = static_cast<std::uint32_t>(m);
          config.mode = smb::UpdateMode::synchronous;
          config.timeout = std::chrono::seconds(60);
          config.group_servers = {group_servers[static_cast<std::size_t>(g)]->address()};
          config.group_transport = group_transport;
          smb::UpdateEngine engine(client, config);
          std::vector<float> w(kFloats, 0.0f);
          engine.initialize(w);
          // Member m of group g: 4g + 2m + i % 5; the group's mean is 4g + 1 + i % 5.
          std::vector<float> grads(kFloats);
          for (std::uint64_t i = 0; i < kFloats; ++i) grads[i] = static_cast<float>(4 * g + 2 * m + i % 5);
          engine.allreduce(grads);
          for (std::uint64_t i = 0; i < kFloats; ++i)
            if (grads[i] != static_cast<float>(4 * g + 1 + i % 5))
              throw std::runtime_error("group " + std::to_string(g) + ": element " + std::to_string(i) + " is " +
                                       std::to_string(grads[i]));
          engine.after_step(grads);  // the roots' exchange, through the fabric's servers
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(g * kMembers + m)] = e.what();
        }
      });
  for (auto& t : workers) t.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
  auto names_on = [](const std::vector<smb::ServerStatus>& servers) {
    std::vector<std::string> names;
    for (const auto& s : servers)
      for (const auto& b : s.buffers) names.push_back(b.name);
    return names;
  };
  const auto fabric = names_on(make_client().status());
  EXPECT_TRUE(std::none_of(fabric.begin(), fabric.end(),
                           [](const std::string& n) { return n.find("/group/") != std::string::npos; }))
      << "a group's buffer landed on the fabric's servers";
  EXPECT_TRUE(std::any_of(fabric.begin(), fabric.end(), [](const std::string& n) { return n == "own-groups/global"; }));
  for (int g = 0; g < kGroups; ++g) {
    smb::ClientOptions own;
    own.servers = {group_servers[static_cast<std::size_t>(g)]->address()};
    own.transport = "ucx";
    const auto names = names_on(smb::Client(own).status());
    EXPECT_NE(std::find(names.begin(), names.end(), "own-groups/group/" + std::to_string(g)), names.end())
        << "group " << g << "'s buffer is not on its own server";
  }
}

// group_transport names the transport to the group's own servers: without
// them it is a mistake, said before anything is created.
TEST_P(ConvergenceTest, GroupTransportWithoutGroupServersIsRefused) {
  auto client = make_client();
  smb::EngineConfig config;
  config.name = "no-own-groups";
  config.parameters = 10;
  config.group_transport = "ucx";
  try {
    smb::UpdateEngine engine(client, config);
    ADD_FAILURE() << "an engine with group_transport and no group_servers was created";
  } catch (const smb::Error& e) {
    EXPECT_EQ(e.code(), smb::Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("group_transport 'ucx' is for group_servers"), std::string::npos) << e.what();
  }
  for (const auto& s : client.status())
    for (const auto& b : s.buffers) EXPECT_EQ(b.name.rfind("no-own-groups", 0), std::string::npos) << b.name;
}

INSTANTIATE_TEST_SUITE_P(Fabrics, ConvergenceTest, testing::ValuesIn(multi_server_fabrics()), fabric_name);

}  // namespace
