// This machine's fp32 ceiling, measured: a large matrix multiply through LibTorch on all cores
// (warmed up, verified, p50 and mean of several runs), and what it means for the reference Net:
// FLOPs per training image and the images/s no implementation can beat.
//   bench-ceiling [--size N] [--runs R] [--images-per-second X]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "models/net.h"

int main(int argc, char** argv) {
  int64_t n = 2048;
  int runs = 10;
  double measured_ips = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--size"))
      n = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--runs"))
      runs = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--images-per-second"))
      measured_ips = std::atof(argv[i + 1]);
  }
  const int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
  torch::manual_seed(0);
  const torch::Tensor a = torch::randn({n, n}), b = torch::randn({n, n});
  torch::Tensor c = torch::mm(a, b);  // warm-up
  // Verify against a float64 product on a slice, as a benchmark should check its own results.
  const torch::Tensor check =
      torch::mm(a.slice(0, 0, 8).to(torch::kFloat64), b.to(torch::kFloat64));
  const double error = (c.slice(0, 0, 8).to(torch::kFloat64) - check).abs().max().item<double>();
  std::vector<double> gflops;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    c = torch::mm(a, b);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    gflops.push_back(2.0 * double(n) * double(n) * double(n) / s / 1e9);
  }
  std::sort(gflops.begin(), gflops.end());
  double mean = 0;
  for (double g : gflops) mean += g / double(gflops.size());
  const double p50 = gflops[gflops.size() / 2];
  const double flops_per_image = 3 * ddp::models::net_forward_flops(3, 32);  // forward + backward
  std::printf("| measure | value |\n|---|---|\n");
  std::printf("| fp32 GEMM %lldx%lld, %d threads, p50 | %.1f GFLOP/s |\n", (long long)n,
              (long long)n, threads, p50);
  std::printf("| fp32 GEMM mean of %d | %.1f GFLOP/s |\n", runs, mean);
  std::printf("| GEMM max abs error vs float64 | %.2e |\n", error);
  std::printf("| Net FLOPs per training image (3 x forward) | %.1f MFLOP |\n",
              flops_per_image / 1e6);
  std::printf("| images/s ceiling (p50 / FLOPs per image) | %.0f |\n", p50 * 1e9 / flops_per_image);
  if (measured_ips > 0) {
    const double achieved = measured_ips * flops_per_image / 1e9;
    std::printf("| achieved at %.0f images/s | %.1f GFLOP/s = %.1f%% of the ceiling |\n",
                measured_ips, achieved, 100 * achieved / p50);
  }
  return error < 1e-2 * double(n) ? 0 : 1;
}
