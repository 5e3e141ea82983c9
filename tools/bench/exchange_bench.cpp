// smb-exchange-bench: one parameter exchange of the update engine against
// MPI_Allreduce, in the same MPI processes (one worker per rank, each its
// own group, tau 1): the testbed issue's P4. Run under mpirun; rank 0
// prints one JSON object. A benchmark, not a test (tools/bench/testbed_exchange.py
// runs it across testbed hosts).
//
//   smb-exchange-bench --servers A,B --mode sync|seasgd --floats N --iters K
//                      [--group-size G --group-servers HOST:PORT [--group-transport ucx]]
//
// With --group-size G, consecutive ranks form groups of G (mpirun places
// ranks by slot, so a group is a host's workers): each iteration is a
// training step's exchange in ETRI's hybrid scheme, the group's average of
// a gradient (through --group-servers, e.g. an smbd on the host's own
// loopback) and then the root's exchange with the global weights, so only
// the node's sum crosses its link. --group-transport ucx averages over
// shared memory while the fabric stays on $SMB_TRANSPORT.
//
// Times are per exchange, the slowest rank's, median over the iterations
// (each iteration starts at an MPI_Barrier). seasgd's exchange reads each
// chunk of the global weights only once its previous push of that chunk is
// in, so back-to-back exchanges measure its steady state (push and read
// overlapping, as they do between training steps); the MPI reference is
// MPI_Allreduce(SUM) plus the scale to the mean, on the same buffer.
#include "../common/tool_setup.hpp"

#include <smb/update_engine.hpp>

#include <CLI/CLI.hpp>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// Each iteration's time on the slowest rank.
template <class F>
std::vector<double> timed(int iters, F&& exchange) {
  std::vector<double> slowest(static_cast<std::size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto begin = Clock::now();
    exchange();
    double mine = std::chrono::duration<double>(Clock::now() - begin).count();
    MPI_Allreduce(&mine, &slowest[static_cast<std::size_t>(i)], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  }
  return slowest;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string list(const std::vector<double>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out + "]";
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  CLI::App app{"The update engine's exchange against MPI_Allreduce, in the same MPI processes", "smb-exchange-bench"};
  std::optional<std::string> servers;
  std::string mode = "sync", name = "exchange-bench";
  std::uint64_t floats = 25'000'000;
  int iters = 5;
  std::uint32_t group_size = 1;
  std::vector<std::string> group_servers;
  std::string group_transport;
  app.add_option("--servers,-s", servers, "memory servers (default: $SMB_SERVERS)");
  app.add_option("--mode", mode, "sync or seasgd")->check(CLI::IsMember({"sync", "seasgd"}))->capture_default_str();
  app.add_option("--floats", floats, "parameters per worker (f32)")->capture_default_str();
  app.add_option("--iters", iters, "timed exchanges of each kind")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--name", name, "the engine's buffer prefix")->capture_default_str();
  app.add_option("--group-size", group_size, "ranks per group (consecutive ranks)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--group-servers", group_servers, "the groups' own servers (default: the fabric's)")->delimiter(',');
  app.add_option("--group-transport", group_transport,
                 "the transport to the groups' own servers (default: $SMB_GROUP_TRANSPORT, else the fabric's)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    MPI_Finalize();
    return code;
  }
  int status = 0;
  try {
    auto options = smb::tools::client_options(servers);
    options.timeout = std::chrono::seconds(600);  // one op moves up to the whole vector over a shared 1 Gbit/s link
    smb::Client client(options);
    smb::EngineConfig config;
    config.name = name;
    config.parameters = floats;
    if (static_cast<std::uint32_t>(ranks) % group_size != 0)
      throw std::invalid_argument(std::to_string(ranks) + " ranks do not divide into groups of " +
                                  std::to_string(group_size));
    config.groups = static_cast<std::uint32_t>(ranks) / group_size;
    config.group = static_cast<std::uint32_t>(rank) / group_size;
    config.group_size = group_size;
    config.group_rank = static_cast<std::uint32_t>(rank) % group_size;
    config.group_servers = group_servers;
    config.group_transport = group_transport;
    config.mode = mode == "sync" ? smb::UpdateMode::synchronous : smb::UpdateMode::seasgd;
    config.timeout = std::chrono::seconds(600);
    smb::UpdateEngine engine(client, config);
    std::vector<float> w(floats, 0.001f * static_cast<float>(rank + 1));
    engine.initialize(w);
    std::vector<float> grad(group_size > 1 ? floats : 0, 1.0f);
    const auto step = [&] {
      if (group_size > 1) engine.allreduce(grad);  // the group's average, on its own servers
      engine.after_step(w);
    };
    step();  // warm-up: lanes, registrations, first touch on the servers
    const auto smb_times = timed(iters, step);
    // Where a grouped step's time goes: the group's average alone.
    const auto group_times = group_size > 1 ? timed(iters, [&] { engine.allreduce(grad); }) : std::vector<double>{};
    std::vector<float> g(floats, 1.0f);
    MPI_Allreduce(MPI_IN_PLACE, g.data(), static_cast<int>(floats), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);  // warm-up
    const auto mpi_times = timed(iters, [&] {
      MPI_Allreduce(MPI_IN_PLACE, g.data(), static_cast<int>(floats), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      const float scale = 1.0f / static_cast<float>(ranks);
      for (auto& x : g) x *= scale;
    });
    std::vector<float> final_weights(floats);
    engine.global_weights(final_weights);
    if (rank == 0)
      std::printf("{\"mode\":\"%s\",\"ranks\":%d,\"group_size\":%u,\"floats\":%llu,\"smb_s\":%s,\"mpi_s\":%s,\"smb_median_s\":%f,"
                  "\"mpi_median_s\":%f,\"group_median_s\":%f}\n",
                  mode.c_str(), ranks, group_size, static_cast<unsigned long long>(floats), list(smb_times).c_str(),
                  list(mpi_times).c_str(), median(smb_times), median(mpi_times),
                  group_times.empty() ? 0.0 : median(group_times));
  } catch (const std::exception& e) {
    std::cerr << "smb-exchange-bench (rank " << rank << "): " << e.what() << '\n';
    status = 1;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
