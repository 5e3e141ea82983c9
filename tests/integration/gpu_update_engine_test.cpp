// The update engine's GPU path (EngineConfig::cuda_device): spans in device
// memory, the group averaging and broadcasting with NCCL, the root
// exchanging with the global weights in the fabric through a host copy.
//
// Where it cannot run, it says why: libsmb built without CUDA, or no CUDA
// device. What runs everywhere is the refusal itself: asking for a device
// where there is none (or no CUDA in libsmb) is an error that names what is
// missing.
#include "expect_error.hpp"
#include "fabric.hpp"

#include <smb/update_engine.hpp>

#include <gtest/gtest.h>

#ifdef SMB_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include <chrono>
#include <cstdio>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace smb::test;

constexpr std::size_t kParams = 3000;  // floats; the values below stay integers far below 2^24, so exact

smb::EngineConfig engine_config(const std::string& name, int cuda_device) {
  smb::EngineConfig config;
  config.name = name;
  config.parameters = kParams;
  config.mode = smb::UpdateMode::seasgd;
  config.alpha = 0.5;
  config.tau = 1;
  config.timeout = std::chrono::seconds(60);
  config.cuda_device = cuda_device;
  return config;
}

#ifdef SMB_WITH_CUDA

// scale * i + shift: integer-valued floats, exact through every step here.
std::vector<float> ramp(float shift, float scale = 1.0f) {
  std::vector<float> v(kParams);
  for (std::size_t i = 0; i < kParams; ++i) v[i] = scale * static_cast<float>(i) + shift;
  return v;
}

// The number of CUDA devices, or why there are none.
struct Devices {
  int count = 0;
  std::string missing;
};

Devices cuda_devices() {
  int count = 0;
  const cudaError_t result = cudaGetDeviceCount(&count);
  if (result != cudaSuccess) {
    (void)cudaGetLastError();
    return {0, std::string("no CUDA device: ") + cudaGetErrorString(result)};
  }
  if (count == 0) return {0, "no CUDA device: cudaGetDeviceCount found none"};
  return {count, ""};
}

void cuda_ok(cudaError_t result, const char* what) {
  if (result != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(result));
}

// A float array on one device, with host copies in and out for checking.
class DeviceFloats {
 public:
  DeviceFloats(int device, std::size_t count) : device_(device), count_(count) {
    cuda_ok(cudaSetDevice(device), "cudaSetDevice");
    void* p = nullptr;
    cuda_ok(cudaMalloc(&p, count * sizeof(float)), "cudaMalloc");
    data_ = static_cast<float*>(p);
  }
  ~DeviceFloats() {
    (void)cudaSetDevice(device_);
    (void)cudaFree(data_);
  }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;

  std::span<float> span() { return {data_, count_}; }
  void set(const std::vector<float>& values) {
    cuda_ok(cudaMemcpy(data_, values.data(), count_ * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  std::vector<float> get() const {
    std::vector<float> values(count_);
    cuda_ok(cudaMemcpy(values.data(), data_, count_ * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    return values;
  }

 private:
  int device_;
  std::size_t count_;
  float* data_ = nullptr;
};

#endif  // SMB_WITH_CUDA

class GpuUpdateEngineTest : public FabricTest {};

TEST_P(GpuUpdateEngineTest, DeviceMemoryWithoutAGpuIsRefusedWithWhatIsMissing) {
  auto client = make_client();
  expect_errc(smb::Errc::invalid_argument, [&] { smb::UpdateEngine engine(client, engine_config("bad-device", -2)); },
              "cuda_device -2");
#ifdef SMB_WITH_CUDA
  const Devices devices = cuda_devices();
  if (devices.count > 0) GTEST_SKIP() << "a CUDA device is present: the tests below run on it";
  const std::string message = expect_errc(
      smb::Errc::invalid_argument, [&] { smb::UpdateEngine engine(client, engine_config("no-gpu", 0)); },
      "engine on cuda_device 0 without a GPU");
  EXPECT_TRUE(mentions(message, devices.missing));  // "no CUDA device: <cudaGetErrorString>"
  EXPECT_TRUE(mentions(message, "update engine 'no-gpu'"));
#else
  const std::string message = expect_errc(
      smb::Errc::invalid_argument, [&] { smb::UpdateEngine engine(client, engine_config("no-cuda", 0)); },
      "engine on cuda_device 0 in a libsmb without CUDA");
  EXPECT_TRUE(mentions(message, "libsmb was built without CUDA (configure with -DSMB_WITH_CUDA=ON; needs CUDA and NCCL)"));
  EXPECT_TRUE(mentions(message, "update engine 'no-cuda'"));
#endif
  std::printf("[ refused  ] %s\n", message.c_str());
}

TEST_P(GpuUpdateEngineTest, OneWorkerOnDeviceMemoryExchangesWithTheGlobalWeights) {
#ifndef SMB_WITH_CUDA
  GTEST_SKIP() << "libsmb built without CUDA";
#else
  const Devices devices = cuda_devices();
  if (devices.count == 0) GTEST_SKIP() << devices.missing;
  auto client = make_client(std::chrono::seconds(60));
  smb::UpdateEngine engine(client, engine_config("gpu-one", 0));
  DeviceFloats params(0, kParams), grads(0, kParams), out(0, kParams);

  params.set(ramp(0));
  engine.initialize(params.span());
  EXPECT_EQ(params.get(), ramp(0)) << "a lone worker's start is the global weights";

  grads.set(ramp(1, 3));
  engine.allreduce(grads.span());
  EXPECT_EQ(grads.get(), ramp(1, 3)) << "the average over a group of one is the gradient itself";

  // The local step moved W to start + 2; seasgd with alpha 0.5 against
  // Wg = start: dW = 1, W = start + 1, and the servers add dW into Wg.
  params.set(ramp(2));
  engine.after_step(params.span());
  EXPECT_EQ(params.get(), ramp(1)) << "W after the exchange";
  engine.global_weights(out.span());
  EXPECT_EQ(out.get(), ramp(1)) << "global weights, read into device memory";
  std::vector<float> host(kParams);
  engine.global_weights(host);
  EXPECT_EQ(host, ramp(1)) << "global weights, read into host memory";

  // Host memory handed to a GPU engine's collectives is an error, not a crash in NCCL.
  const std::string message = expect_errc(
      smb::Errc::invalid_argument, [&] { engine.allreduce(host); }, "allreduce of host memory on a GPU engine");
  EXPECT_TRUE(mentions(message, "not memory on CUDA device 0"));
#endif
}

TEST_P(GpuUpdateEngineTest, TwoWorkersOnTwoDevicesAverageAndBroadcastWithNccl) {
#ifndef SMB_WITH_CUDA
  GTEST_SKIP() << "libsmb built without CUDA";
#else
  const Devices devices = cuda_devices();
  if (devices.count == 0) GTEST_SKIP() << devices.missing;
  if (devices.count < 2) GTEST_SKIP() << "needs 2 CUDA devices, found " << devices.count;
  constexpr int kWorkers = 2;
  std::vector<std::string> errors(kWorkers);
  std::vector<std::thread> workers;
  for (int rank = 0; rank < kWorkers; ++rank)
    workers.emplace_back([&, rank] {
      try {
        auto client = make_client(std::chrono::seconds(60));
        auto config = engine_config("gpu-two", rank);
        config.group_size = kWorkers;
        config.group_rank = static_cast<std::uint32_t>(rank);
        smb::UpdateEngine engine(client, config);
        DeviceFloats params(rank, kParams), grads(rank, kParams), out(rank, kParams);

        params.set(rank == 0 ? ramp(0) : ramp(7, 0));  // the root's start is everyone's
        engine.initialize(params.span());
        EXPECT_EQ(params.get(), ramp(0)) << "rank " << rank << " after initialize";

        grads.set(ramp(0, 2.0f * static_cast<float>(rank + 1)));  // 2i and 4i: the average is 3i
        engine.allreduce(grads.span());
        EXPECT_EQ(grads.get(), ramp(0, 3)) << "rank " << rank << ": NCCL average";

        // The root exchanges (start + 2 -> start + 1) and broadcasts; the
        // member's own W (all 5) is replaced.
        params.set(rank == 0 ? ramp(2) : ramp(5, 0));
        engine.after_step(params.span());
        EXPECT_EQ(params.get(), ramp(1)) << "rank " << rank << ": W after the exchange and NCCL broadcast";

        // The root's push into Wg overlaps; it is done once the root has read.
        if (rank == 0) engine.global_weights(out.span());
        client.barrier("gpu-two/root-read", kWorkers, std::chrono::seconds(60));
        if (rank != 0) engine.global_weights(out.span());
        EXPECT_EQ(out.get(), ramp(1)) << "rank " << rank << ": global weights";
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(rank)] = e.what();
      }
    });
  for (auto& t : workers) t.join();
  for (int rank = 0; rank < kWorkers; ++rank) EXPECT_EQ(errors[static_cast<std::size_t>(rank)], "") << "rank " << rank;
#endif
}

INSTANTIATE_TEST_SUITE_P(Fabrics, GpuUpdateEngineTest, testing::Values(ucx_shm_fabric(1)), fabric_name);

}  // namespace
