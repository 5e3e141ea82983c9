// smb-accumulate-bench: server-side accumulate throughput (bytes of source
// per second) against two references measured in the same run:
//   memcpy            one core copying the same number of bytes locally
//   client RMW        what a client would do without server-side ops: take
//                     a lock, read the region, add locally, write it back
// Prints a markdown table (the ratios go to docs/benchmarks.md).
#include <smb/client.hpp>

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

template <class F>
double seconds(int iters, F f) {
  f();  // warm-up
  const auto begin = Clock::now();
  for (int i = 0; i < iters; ++i) f();
  return std::chrono::duration<double>(Clock::now() - begin).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Server-side accumulate vs memcpy vs client read-modify-write under a lock", "smb-accumulate-bench"};
  std::string servers, size_text = "64M";
  int iters = 10;
  app.add_option("--servers,-s", servers, "memory servers (default: $SMB_SERVERS)");
  app.add_option("--size", size_text, "bytes of f32 per op")->capture_default_str();
  app.add_option("--iters", iters, "timed repetitions")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    smb::ClientOptions options;
    if (!servers.empty()) options.servers = smb::parse_server_list(servers);
    options.timeout = std::chrono::seconds(120);
    smb::Client client(options);
    const std::uint64_t bytes = smb::parse_size(size_text) / 4 * 4, n = bytes / 4;
    const std::string tag = std::to_string(::getpid());
    auto target = client.create("accbench-y-" + tag, bytes);
    auto delta = client.create("accbench-x-" + tag, bytes);
    std::vector<float> ones(n, 1.0f), local(n), copy(n);
    delta.write(0, std::as_bytes(std::span(ones)));

    const double t_memcpy = seconds(iters, [&] { std::memcpy(copy.data(), ones.data(), bytes); });
    const double t_server =
        seconds(iters, [&] { target.apply_from(smb::VectorOp::accumulate, smb::DType::f32, 0, n, 1.0, delta, 0); });
    const double t_inline =
        seconds(iters, [&] { target.apply(smb::VectorOp::accumulate, smb::DType::f32, 0, n, 1.0, std::as_bytes(std::span(ones))); });
    const double t_rmw = seconds(iters, [&] {
      auto lock = client.lock("accbench-lock-" + tag);
      target.read(0, std::as_writable_bytes(std::span(local)));
      for (std::uint64_t i = 0; i < n; ++i) local[i] += ones[i];
      target.write(0, std::as_bytes(std::span(local)));
    });
    auto rate = [&](double t) { return static_cast<double>(bytes) * iters / t / 1e9; };
    std::printf("| measure | GB/s of source | ratio to memcpy |\n|---|---:|---:|\n");
    std::printf("| memcpy (one core, local) | %.2f | 1.00 |\n", rate(t_memcpy));
    std::printf("| server-side accumulate (apply_from) | %.2f | %.2f |\n", rate(t_server), t_memcpy / t_server);
    std::printf("| server-side accumulate, x sent with the op (apply) | %.2f | %.2f |\n", rate(t_inline),
                t_memcpy / t_inline);
    std::printf("| client read-modify-write under a lock | %.2f | %.2f |\n", rate(t_rmw), t_memcpy / t_rmw);
    std::printf("\nserver-side accumulate / client RMW: %.2f; %d ops of %s over %zu server(s); path: %s\n",
                t_rmw / t_server, iters, size_text.c_str(), target.layout().servers.size(),
                client.describe_paths().front().c_str());
    client.destroy(target.name());
    client.destroy(delta.name());
  } catch (const std::exception& e) {
    std::cerr << "smb-accumulate-bench: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
