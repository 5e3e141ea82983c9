// smb-caffe: `caffe train` over the Soft Memory Box fabric. An ordinary
// Caffe solver file, unchanged, trained by every worker of a job:
//
//   smbrun -np 4 -- smb-caffe train --solver lenet_solver.prototxt --mode seasgd --groups 2
//
// Modes: seasgd | downpour | sync (the fabric: groups average gradients
// every step, roots exchange with the global weights every --tau steps),
// single (plain Caffe, one worker), allreduce-mpi (every worker averages
// its gradients with MPI_Allreduce every step, for comparison; built where
// MPI is found, launched with mpirun). Ranks come from the launcher (smbrun,
// mpirun, torchrun, Slurm). Caffe's data layers shard by solver rank as in
// its multi-GPU training (HDF5Data: row i goes to rank i mod workers).
// Rank 0 prints the final test accuracy (the test net's "accuracy"
// output, averaged over test_iter batches) and the training time (from the
// moment every worker is ready); --json prints them as JSON.
#include "smb_caffe/fabric_sync.hpp"

#include <smb/client.hpp>

#include <CLI/CLI.hpp>
#include <caffe/caffe.hpp>
#include <glog/logging.h>

#ifdef SMB_CAFFE_WITH_MPI
#include <mpi.h>
#endif

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

namespace {

std::optional<std::uint32_t> env_uint(std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return static_cast<std::uint32_t>(std::stoul(v));
  return std::nullopt;
}

std::string job_id() {
  for (const char* name : {"SMB_JOB_ID", "OMPI_MCA_ess_base_jobid", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"})
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return v;
  return "default";
}

smb::UpdateMode mode_named(const std::string& mode) {
  if (mode == "seasgd") return smb::UpdateMode::seasgd;
  if (mode == "downpour") return smb::UpdateMode::downpour;
  return smb::UpdateMode::synchronous;
}

// Averages the gradients over every worker with MPI_Allreduce (the
// comparison the fabric is measured against).
#ifdef SMB_CAFFE_WITH_MPI
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnon-virtual-dtor"  // as FabricSync: Caffe's Callback has none
class MpiAverage : public caffe::Solver<float>::Callback {
 public:
  explicit MpiAverage(caffe::Solver<float>& solver) : params_(solver.net()->learnable_params()) {
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }

 protected:
  void on_start() override {}
  void on_gradients_ready() override {
    for (auto* blob : params_) {
      MPI_Allreduce(MPI_IN_PLACE, blob->mutable_cpu_diff(), blob->count(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      caffe::caffe_scal(blob->count(), 1.0f / static_cast<float>(size_), blob->mutable_cpu_diff());
    }
  }

 private:
  std::vector<caffe::Blob<float>*> params_;
  int size_ = 1;
};
#pragma GCC diagnostic pop
#endif

// Caffe lets only the root solver Solve() (it tests and snapshots); the
// others step through the same iterations, as its multi-GPU workers do.
void run(caffe::Solver<float>& solver) {
  if (caffe::Caffe::root_solver())
    solver.Solve();
  else
    solver.Step(solver.param().max_iter() - solver.iter());
}

// The test net's "accuracy" output averaged over test_iter batches.
double test_accuracy(caffe::Solver<float>& solver, int iterations) {
  auto& net = *solver.test_nets().at(0);
  net.ShareTrainedLayersWith(solver.net().get());
  double sum = 0;
  for (int i = 0; i < iterations; ++i) {
    net.Forward();
    const auto& names = net.blob_names();
    for (std::size_t j = 0; j < net.output_blobs().size(); ++j)
      if (names[net.output_blob_indices()[j]] == "accuracy") sum += net.output_blobs()[j]->cpu_data()[0];
  }
  return sum / iterations;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"smb-caffe: Caffe training over the Soft Memory Box fabric", "smb-caffe"};
  app.require_subcommand(1);
  auto* train = app.add_subcommand("train", "Train with a solver file, like `caffe train`");
  std::string solver_path, weights, mode = "seasgd", servers;
  std::uint32_t tau = 1, groups = 0, max_iter = 0;
  double alpha = 0.2;
  bool json = false;
  train->add_option("--solver", solver_path, "Caffe solver prototxt")->required()->check(CLI::ExistingFile);
  train->add_option("--weights", weights, "initial weights (.caffemodel)");
  train->add_option("--mode", mode, "how workers combine their work")
      ->check(CLI::IsMember({"seasgd", "downpour", "sync", "single", "allreduce-mpi"}))
      ->capture_default_str();
  train->add_option("--tau", tau, "steps between exchanges with the global weights")->capture_default_str();
  train->add_option("--alpha", alpha, "seasgd moving rate")->capture_default_str();
  train->add_option("--groups", groups, "groups of consecutive ranks (default: one per node)");
  train->add_option("--max-iter", max_iter, "iterations to run (default: the solver's max_iter)");
  train->add_option("--servers", servers, "memory servers (default: $SMB_SERVERS)");
  std::string group_servers;
  train->add_option("--group-servers", group_servers,
                    "memory servers for each group's own averaging, e.g. an smbd on the node "
                    "(default: $SMB_GROUP_SERVERS, else --servers)");
  train->add_flag("--json", json, "print the result as one JSON line");
  CLI11_PARSE(app, argc, argv);

  const auto rank = env_uint({"OMPI_COMM_WORLD_RANK", "SMB_RANK", "RANK", "SLURM_PROCID"}).value_or(0);
  const auto workers = env_uint({"OMPI_COMM_WORLD_SIZE", "SMB_SIZE", "WORLD_SIZE", "SLURM_NTASKS"}).value_or(1);
  const auto local = env_uint({"OMPI_COMM_WORLD_LOCAL_SIZE", "SMB_LOCAL_SIZE", "LOCAL_WORLD_SIZE"}).value_or(workers);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = rank == 0 ? google::GLOG_INFO : google::GLOG_WARNING;
  try {
    caffe::Caffe::set_mode(caffe::Caffe::CPU);
    caffe::Caffe::set_solver_count(static_cast<int>(workers));  // data layers shard by rank
    caffe::Caffe::set_solver_rank(static_cast<int>(rank));
    caffe::SolverParameter param;
    caffe::ReadSolverParamsFromTextFileOrDie(solver_path, &param);
    param.set_snapshot_after_train(false);
    if (max_iter != 0) param.set_max_iter(static_cast<int>(max_iter));
    std::shared_ptr<caffe::Solver<float>> solver(caffe::SolverRegistry<float>::CreateSolver(param));
    if (!weights.empty()) solver->net()->CopyTrainedLayersFrom(weights);
    // Timed: the training itself, from the moment every worker is ready
    // (connections, buffers and start-up skew between workers are not).
    auto started = std::chrono::steady_clock::now();
    if (mode == "single") {
      solver->Solve();
    } else if (mode == "allreduce-mpi") {
#ifdef SMB_CAFFE_WITH_MPI
      MPI_Init(&argc, &argv);
      MpiAverage average(*solver);
      solver->add_callback(&average);
      MPI_Barrier(MPI_COMM_WORLD);
      started = std::chrono::steady_clock::now();
      run(*solver);
      MPI_Finalize();
#else
      throw smb::Error(smb::Errc::invalid_argument, "--mode allreduce-mpi: smb-caffe was built without MPI");
#endif
    } else {
      smb::ClientOptions options;
      if (!servers.empty()) options.servers = smb::parse_server_list(servers);
      options.timeout = std::chrono::minutes(2);
      smb::Client client(options);
      smb::caffe_plugin::SyncOptions sync;
      sync.name = "caffe/" + job_id();
      sync.mode = mode_named(mode);
      sync.tau = tau;
      sync.alpha = alpha;
      if (group_servers.empty())
        if (const char* env = std::getenv("SMB_GROUP_SERVERS")) group_servers = env;
      if (!group_servers.empty()) sync.group_servers = smb::parse_server_list(group_servers);
      sync.rank = rank;
      sync.workers = workers;
      sync.groups = groups != 0 ? groups : std::max<std::uint32_t>(1, workers / local);
      smb::caffe_plugin::FabricSync fabric(client, *solver, sync);
      solver->add_callback(&fabric);
      fabric.initialize();
      started = std::chrono::steady_clock::now();
      run(*solver);
      fabric.finish();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (rank == 0 && !solver->test_nets().empty()) {
      const double accuracy = test_accuracy(*solver, param.test_iter_size() > 0 ? param.test_iter(0) : 1);
      if (json)
        std::cout << "{\"accuracy\": " << accuracy << ", \"seconds\": " << seconds << ", \"iterations\": "
                  << solver->iter() << ", \"workers\": " << workers << ", \"mode\": \"" << mode << "\"}"
                  << std::endl;
      else
        std::cout << "final test accuracy " << accuracy << " after " << solver->iter() << " iterations, " << seconds
                  << " s" << std::endl;
    }
  } catch (const std::exception& e) {
    std::cerr << "smb-caffe: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
