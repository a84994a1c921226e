// This machine's fp32 ceiling, measured: a large matrix multiply on all cores (warmed up,
// verified, p50 and mean of several runs) by the two paths LibTorch has, oneDNN and its BLAS, and
// by the oneDNN that Net's own layers call (Debian's 2.x, where built with it), and what it means
// for the reference Net: FLOPs per training image and the images/s no implementation can beat.
// With --bf16, the same multiply in bf16 beside it, against the fp32 ceiling; one core's peak
// bf16 dot-product rate against its fp32 FMA rate; and the images/s bf16 can reach at most.
//   bench-ceiling [--size N] [--runs R] [--images-per-second X] [--bf16]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <immintrin.h>
#include <strings.h>
#include <unistd.h>

#include <torch/torch.h>

#include "ddp/environment.h"
#include "ddp/models/net.h"
#include "ddp/models/onednn_conv2d.h"
#include "ddp_build_config.h"

#if defined(DDP_HAVE_ONEDNN)
#include <oneapi/dnnl/dnnl.h>
#endif

namespace {

// p50 and mean GFLOP/s of `runs` timed calls of `gemm`, an n x n x n multiply.
struct Rate {
  double p50 = 0, mean = 0;
};
template <class F>
Rate measure(int64_t n, int runs, F gemm) {
  gemm();  // warm-up: oneDNN builds its kernel, OpenBLAS starts its threads
  std::vector<double> gflops;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    gemm();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    gflops.push_back(2.0 * double(n) * double(n) * double(n) / s / 1e9);
  }
  std::sort(gflops.begin(), gflops.end());
  Rate rate;
  for (double g : gflops) rate.mean += g / double(gflops.size());
  rate.p50 = gflops[gflops.size() / 2];
  return rate;
}

// The ceiling is the machine's, so BLAS runs its fastest kernels. Debian 12's OpenBLAS (0.3.21)
// does not know AMD Zen 5 and takes its AVX2 kernels there, and this workplace's environment
// sets OPENBLAS_CORETYPE=Haswell as well: half the AVX-512 peak (measured on the 2-vCPU machine:
// 194 against 360 GFLOP/s). OpenBLAS picks its kernels when it is loaded, before main(), so
// the program starts itself again with the AVX-512 core type named.
bool has_avx512_core_type(const char* name) {
  for (const char* core : {"SkylakeX", "CooperLake", "SapphireRapids"}) {
    if (name != nullptr && strcasecmp(name, core) == 0) return true;
  }
  return false;
}
void run_openblas_with_avx512_kernels(char** argv) {
  if (!__builtin_cpu_supports("avx512f") ||
      has_avx512_core_type(std::getenv(ddp::env::kOpenblasCoretype)))
    return;
  ::setenv(ddp::env::kOpenblasCoretype, "SkylakeX", 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: then measure as we are
}

// The BLAS LibTorch was built with (BLAS_INFO in its configuration: mkl, open, ...).
std::string libtorch_blas() {
  const std::string config = torch::show_config();
  const size_t at = config.find("BLAS_INFO=");
  if (at == std::string::npos) return "unknown";
  return config.substr(at + 10, config.find_first_of(", \n", at) - at - 10);
}

// The arithmetic peak of one core, GFLOP/s, by a loop of 12 independent chains of one 512-bit
// instruction on registers only: fp32 FMA (vfmadd231ps, 32 FLOP), or, where the CPU has
// AVX512-BF16, bf16 dot products (vdpbf16ps, 64 FLOP). Whether a library's slow bf16 GEMM is
// the library's or the hardware's: their ratio bounds every bf16 kernel's gain. Each loop is a
// function of its own because its intrinsics need that function's target attribute.
constexpr int kChains = 12;
constexpr long kPeakIterations = 20'000'000;

// Stores the chains' results where the compiler must assume they are read, so that it keeps
// the loop.
volatile float peak_sink;
__attribute__((target("avx512f"))) void keep(const __m512 (&acc)[kChains]) {
  alignas(64) float lanes[16];
  for (const __m512& a : acc) {
    _mm512_store_ps(lanes, a);
    peak_sink = lanes[0];
  }
}

__attribute__((target("avx512f"))) void fma_chains() {
  __m512 acc[kChains];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  const volatile float one = 1.0f;  // not a constant the compiler could fold
  const __m512 x = _mm512_set1_ps(one);
  for (long i = 0; i < kPeakIterations; ++i) {
    for (__m512& a : acc) a = _mm512_fmadd_ps(x, x, a);
  }
  keep(acc);
}

__attribute__((target("avx512f,avx512bf16"))) void dpbf16_chains() {
  __m512 acc[kChains];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  const volatile short one = 0x3f80;  // 1.0 in bf16
  const __m512bh x = (__m512bh)_mm512_set1_epi16(one);
  for (long i = 0; i < kPeakIterations; ++i) {
    for (__m512& a : acc) a = _mm512_dpbf16_ps(a, x, x);
  }
  keep(acc);
}

// GFLOP/s of `chains`, one of the loops above, whose instruction does `flops` FLOP.
double peak_gflops(void (*chains)(), int flops) {
  const auto t0 = std::chrono::steady_clock::now();
  chains();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return double(kChains) * double(kPeakIterations) * flops / s / 1e9;
}

#if defined(DDP_HAVE_ONEDNN)
int layers_onednn_major() { return int(dnnl_version()->major); }
int layers_onednn_minor() { return int(dnnl_version()->minor); }
#else
int layers_onednn_major() { return 0; }
int layers_onednn_minor() { return 0; }
#endif

}  // namespace

int main(int argc, char** argv) {
  run_openblas_with_avx512_kernels(argv);
  int64_t n = 2048;
  int runs = 10;
  double measured_ips = 0;
  bool with_bf16 = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--bf16"))
      with_bf16 = true;
    else if (i + 1 == argc)
      break;
    else if (!std::strcmp(argv[i], "--size"))
      n = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--runs"))
      runs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--images-per-second"))
      measured_ips = std::atof(argv[++i]);
  }
  const int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
  torch::manual_seed(0);
  // Two ways LibTorch multiplies matrices: oneDNN's inner product (the kernels of Net's
  // convolutions; input in oneDNN's own layout so that only the GEMM is timed) and torch::mm
  // (the system BLAS, the path of Net's linear layer; OpenBLAS after scripts/setup.sh). The
  // ceiling is the faster of the two.
  const torch::Tensor a = torch::randn({n, n}), b = torch::randn({n, n});
  const torch::Tensor a_onednn = a.to_mkldnn();
  torch::Tensor y = torch::mkldnn_linear(a_onednn, b, {}).to_dense();
  // Verify one output column against a float64 product, as a benchmark should check itself
  // (linear computes a b^T, mm a b).
  const torch::Tensor a64 = a.to(torch::kFloat64);
  const double error =
      (y.select(1, 0).to(torch::kFloat64) - a64.matmul(b.select(0, 0).to(torch::kFloat64)))
          .abs()
          .max()
          .item<double>();
  const Rate onednn = measure(n, runs, [&] { y = torch::mkldnn_linear(a_onednn, b, {}); });
  torch::Tensor c;
  const Rate blas = measure(n, runs, [&] { c = torch::mm(a, b); });
  const double mm_error =
      (c.select(1, 0).to(torch::kFloat64) - a64.matmul(b.select(1, 0).to(torch::kFloat64)))
          .abs()
          .max()
          .item<double>();
  // The oneDNN Net's layers call: LibTorch's own BLAS may be MKL, which takes its AVX2 kernels on
  // AMD processors (PyPI's wheels: ~130 GFLOP/s on the 2-vCPU Zen 5 against ~330 by AVX-512).
  Rate layers;
  double layers_error = 0;
  int layers_status = 0;  // dnnl_sgemm's, where it failed
#if defined(DDP_HAVE_ONEDNN)
  torch::Tensor d = torch::empty({n, n});
  dnnl_status_t status = dnnl_success;
  const auto sgemm = [&] {
    status = dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data_ptr<float>(), n, b.data_ptr<float>(), n,
                        0.0f, d.data_ptr<float>(), n);
  };
  sgemm();
  // Debian 12's oneDNN 2.6 answers 'unimplemented' (3) in a process that loads PyPI's LibTorch
  // 2.14 (whose libtorch_cpu exports MKL's BLAS symbols), which it does not in a program of its
  // own: then it is no part of the ceiling (Net's layers use no GEMM: runs_jit_kernel()).
  if (status == dnnl_success) {
    layers = measure(n, runs, sgemm);
    layers_error =
        (d.select(1, 0).to(torch::kFloat64) - a64.matmul(b.select(1, 0).to(torch::kFloat64)))
            .abs()
            .max()
            .item<double>();
  } else {
    layers_status = int(status);
  }
#endif
  // bf16 (`--precision bf16`) gains only where the CPU multiplies bf16 faster than fp32, and
  // AVX512-BF16 without AMX may not (docs/performance.md: half the fp32 rate on a Xeon VM).
  // Only bench/bf16.sh asks: compare.sh's ceiling after every run need not pay for it.
  Rate bf16;
  if (with_bf16) {
    const torch::Tensor a16 = a.to(torch::kBFloat16), b16 = b.to(torch::kBFloat16);
    torch::Tensor c16;
    bf16 = measure(n, runs, [&] { c16 = torch::mm(a16, b16); });
  }
  const bool peaks =
      with_bf16 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  const double fma_peak = peaks ? peak_gflops(fma_chains, 32) : 0;
  const double dpbf16_peak = peaks ? peak_gflops(dpbf16_chains, 64) : 0;
  const double ceiling = std::max({onednn.p50, blas.p50, layers.p50});
  const double flops_per_image = 3 * ddp::models::net_forward_flops(3, 32);  // forward + backward
  std::printf("| measure | value |\n|---|---|\n");
  std::printf(
      "| fp32 GEMM %lld^3 via oneDNN (inner product), %d threads, p50 / mean of %d | %.1f / "
      "%.1f GFLOP/s |\n",
      (long long)n, threads, runs, onednn.p50, onednn.mean);
  std::printf(
      "| fp32 GEMM %lld^3 via torch::mm (system BLAS), %d threads, p50 / mean of %d | "
      "%.1f / %.1f GFLOP/s |\n",
      (long long)n, threads, runs, blas.p50, blas.mean);
  if (layers.p50 > 0) {
    std::printf(
        "| fp32 GEMM %lld^3 via the oneDNN %d.%d of Net's layers (sgemm), %d threads, p50 / mean "
        "of %d | %.1f / %.1f GFLOP/s |\n",
        (long long)n, layers_onednn_major(), layers_onednn_minor(), threads, runs, layers.p50,
        layers.mean);
  } else if (layers_status != 0) {
    std::printf(
        "| fp32 GEMM via the oneDNN %d.%d of Net's layers (sgemm) | fails in this process "
        "(status %d), not measured |\n",
        layers_onednn_major(), layers_onednn_minor(), layers_status);
  }
  std::printf("| LibTorch's BLAS | %s |\n", libtorch_blas().c_str());
  const char* core = std::getenv(ddp::env::kOpenblasCoretype);
  std::printf("| OpenBLAS kernels, if OpenBLAS (%s) | %s |\n", ddp::env::kOpenblasCoretype,
              core ? core : "detected");
  std::printf("| ceiling (the fastest p50) | %.1f GFLOP/s |\n", ceiling);
  if (with_bf16) {
    std::printf(
        "| bf16 GEMM %lld^3 via torch::mm, %d threads, p50 / mean of %d | %.1f / %.1f GFLOP/s = "
        "%.2fx the fp32 ceiling |\n",
        (long long)n, threads, runs, bf16.p50, bf16.mean, bf16.p50 / ceiling);
    if (peaks) {
      std::printf(
          "| one core's peak: bf16 dot product (vdpbf16ps) / fp32 FMA (vfmadd231ps) | %.1f / "
          "%.1f GFLOP/s = %.2fx |\n",
          dpbf16_peak, fma_peak, dpbf16_peak / fma_peak);
    } else {
      std::printf("| one core's peak: bf16 dot product / fp32 FMA | no AVX512-BF16 here |\n");
    }
  }
  std::printf(
      "| GEMM max abs error vs float64 (oneDNN, BLAS, layers' oneDNN) | %.2e, %.2e, %.2e |\n",
      error, mm_error, layers_error);
  std::printf("| Net FLOPs per training image (3 x forward, direct convolution) | %.1f MFLOP |\n",
              flops_per_image / 1e6);
  // Achieved GFLOP/s counts a direct convolution's FLOPs, as is the custom; say when Net's conv2
  // (91% of them) actually runs by Winograd, which multiplies 2.25x less.
  const bool winograd =
      ddp::models::onednn_conv2d_available(64, 128, ddp::models::ConvAlgorithm::kWinograd);
  std::printf("| Net's conv2 here | %s |\n",
              winograd ? "Winograd F(4x4,3x3): achieved counts direct FLOPs, 2.25x its multiplies"
                       : "direct");
  std::printf("| images/s ceiling (ceiling / FLOPs per image) | %.0f |\n",
              ceiling * 1e9 / flops_per_image);
  // bf16 has no Winograd kernels (oneDNN's are fp32 only): every bf16 FLOP of Net is multiplied.
  if (with_bf16) {
    std::printf("| bf16 images/s ceiling (bf16 GEMM / FLOPs per image) | %.0f |\n",
                bf16.p50 * 1e9 / flops_per_image);
  }
  if (measured_ips > 0) {
    const double achieved = measured_ips * flops_per_image / 1e9;
    std::printf("| achieved at %.0f images/s | %.1f GFLOP/s = %.1f%% of the ceiling |\n",
                measured_ips, achieved, 100 * achieved / ceiling);
    if (winograd) {  // conv2's share of the FLOPs done with 2.25x fewer multiplies
      const double side = 32, conv2 = 2.0 * (side * side / 4) * 128 * 64 * 9;
      const double share = conv2 / ddp::models::net_forward_flops(3, 32);
      const double executed = achieved * (1 - share + share / 2.25);
      std::printf(
          "| achieved, counting the multiplies executed (conv2's at 1/2.25) | %.1f GFLOP/s = "
          "%.1f%% of the ceiling |\n",
          executed, 100 * executed / ceiling);
    }
  }
  const double tolerance = 1e-2 * double(n);
  return error < tolerance && mm_error < tolerance && layers_error < tolerance ? 0 : 1;
}
