// This machine's fp32 ceiling, measured: a large matrix multiply through LibTorch on all cores
// (warmed up, verified, p50 and mean of several runs), and what it means for the reference Net:
// FLOPs per training image and the images/s no implementation can beat. The GEMM runs as a 1x1
// convolution, which goes through oneDNN like Net's convolutions do: Debian's LibTorch 1.13 has
// no MKL and its torch::mm is far slower (printed too, for comparison).
//   bench-ceiling [--size N] [--runs R] [--images-per-second X]
#include <algorithm>
#include <chrono>
#include <cmath>
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
  // [1, n, n/32, 32] x [n, n, 1, 1]: an n x n x n GEMM.
  const torch::Tensor x = torch::randn({1, n, n / 32, 32}), w = torch::randn({n, n, 1, 1});
  torch::Tensor y = torch::conv2d(x, w);  // warm-up
  // Verify one output pixel against a float64 dot product, as a benchmark should check itself.
  const torch::Tensor expected = (w.view({n, n})
                                      .to(torch::kFloat64)
                                      .matmul(x[0].select(1, 0).select(1, 0).to(torch::kFloat64)));
  const double error =
      (y[0].select(1, 0).select(1, 0).to(torch::kFloat64) - expected).abs().max().item<double>();
  std::vector<double> gflops;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    y = torch::conv2d(x, w);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    gflops.push_back(2.0 * double(n) * double(n) * double(n) / s / 1e9);
  }
  const torch::Tensor a = torch::randn({n / 2, n / 2}), b = torch::randn({n / 2, n / 2});
  torch::mm(a, b);
  const auto m0 = std::chrono::steady_clock::now();
  torch::mm(a, b);
  const double mm_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count();
  const double mm_gflops = 2.0 * std::pow(double(n / 2), 3) / mm_seconds / 1e9;
  std::sort(gflops.begin(), gflops.end());
  double mean = 0;
  for (double g : gflops) mean += g / double(gflops.size());
  const double p50 = gflops[gflops.size() / 2];
  const double flops_per_image = 3 * ddp::models::net_forward_flops(3, 32);  // forward + backward
  std::printf("| measure | value |\n|---|---|\n");
  std::printf("| fp32 GEMM %lld^3 via oneDNN (1x1 conv), %d threads, p50 | %.1f GFLOP/s |\n",
              (long long)n, threads, p50);
  std::printf("| fp32 GEMM via oneDNN, mean of %d | %.1f GFLOP/s |\n", runs, mean);
  std::printf("| fp32 torch::mm %lld^3 (Debian's BLAS path, not the ceiling) | %.1f GFLOP/s |\n",
              (long long)(n / 2), mm_gflops);
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
