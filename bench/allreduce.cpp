// The process group's all-reduce, measured the way nccl-tests does: for each size from 4 KiB to
// 64 MiB (float32, in place), the mean latency of back-to-back all-reduces, the algorithm
// bandwidth (bytes / latency) and the bus bandwidth (algbw x 2(n-1)/n: what each link of a ring
// carries, comparable to the wire rate whatever the number of ranks). Run it under a launcher:
//   ddprun --nproc-per-node 2 -- bench-allreduce [--min-bytes B] [--max-bytes B] [--seconds S]
// Rank 0 prints a markdown table; every size is checked for the right sum first.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

#include <torch/torch.h>

#include "ddp/process_group.h"

namespace {

struct Settings {
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = 64 << 20;
  double seconds = 0.5;  // about how long each size is timed
};

Settings parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--min-bytes"))
      s.min_bytes = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--max-bytes"))
      s.max_bytes = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seconds"))
      s.seconds = std::atof(argv[i + 1]);
    else
      throw std::invalid_argument(std::string("unknown argument ") + argv[i]);
  }
  if (s.min_bytes < 4 || s.max_bytes < s.min_bytes || s.seconds <= 0)
    throw std::invalid_argument("need 4 <= --min-bytes <= --max-bytes and --seconds > 0");
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Each rank contributes rank + 1; the sum must be n(n+1)/2 everywhere.
void check_sum(ddp::ProcessGroup& pg, torch::Tensor& t) {
  t.fill_(pg.rank() + 1);
  pg.allreduce(t).wait();
  const double expected = pg.size() * (pg.size() + 1) / 2.0;
  if (!t.eq(expected).all().item<bool>())
    throw std::runtime_error("all-reduce of " + std::to_string(t.numel()) +
                             " floats gave a wrong sum");
}

// Mean seconds of one all-reduce of `t`; every rank runs the same number of them (rank 0's
// estimate from one timed call, broadcast).
double time_allreduce(ddp::ProcessGroup& pg, torch::Tensor& t, double budget_seconds) {
  t.zero_();
  auto t0 = std::chrono::steady_clock::now();
  pg.allreduce(t).wait();  // warm-up, and the estimate
  torch::Tensor iterations = torch::tensor(
      {int64_t(std::clamp(budget_seconds / std::max(seconds_since(t0), 1e-6), 3.0, 10000.0))});
  pg.broadcast(iterations, 0).wait();
  const int64_t n = iterations.item<int64_t>();
  pg.barrier();
  t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) pg.allreduce(t).wait();
  torch::Tensor elapsed = torch::tensor({seconds_since(t0)}, torch::kFloat64);
  pg.allreduce_max(elapsed).wait();  // the slowest rank's time is the collective's time
  return elapsed.item<double>() / double(n);
}

}  // namespace

int main(int argc, char** argv) try {
  const Settings settings = parse(argc, argv);
  auto pg = ddp::ProcessGroup::init(ddp::ProcessGroupOptions{});
  const int n = pg->size();
  const double bus_factor = n > 1 ? 2.0 * (n - 1) / n : 1.0;
  if (pg->rank() == 0) {
    std::printf("all-reduce of float32, in place, %d ranks, backend %s\n\n", n,
                pg->backend().c_str());
    std::printf("| size | latency (us) | algbw (GB/s) | busbw (GB/s) | busbw (Gbit/s) |\n");
    std::printf("|---:|---:|---:|---:|---:|\n");
  }
  for (int64_t bytes = settings.min_bytes; bytes <= settings.max_bytes; bytes *= 4) {
    torch::Tensor t = torch::empty({bytes / 4}, torch::kFloat32);
    check_sum(*pg, t);
    const double latency = time_allreduce(*pg, t, settings.seconds);
    const double algbw = double(bytes) / latency / 1e9;
    if (pg->rank() == 0) {
      const std::string size = bytes < (1 << 20) ? std::to_string(bytes >> 10) + " KiB"
                                                 : std::to_string(bytes >> 20) + " MiB";
      std::printf("| %s | %.0f | %.3f | %.3f | %.2f |\n", size.c_str(), latency * 1e6, algbw,
                  algbw * bus_factor, algbw * bus_factor * 8);
      std::fflush(stdout);
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench-allreduce: %s\n", e.what());
  return 1;
}
