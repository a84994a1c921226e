// Communication hooks against the plain path: fp16/bf16 compression and PowerSGD give the
// average of every rank's gradients (exactly where the maths says so, within the wire
// precision otherwise), PowerSGD's error feedback loses nothing, and DDP reports the bytes.
#include <gtest/gtest.h>

#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "ddp/algorithms/comm_hook_registry.h"
#include "ddp/algorithms/powersgd.h"
#include "ddp/ddp.h"
#include "ddp/error.h"
#include "ddp/models/net.h"
#include "support/process.h"

namespace ddp {
namespace {

// Rank r's gradients at step s: a 24 x 16 matrix and a vector of 16, in one flat bucket.
// (A generator of its own: ranks are threads, and the global one is shared.)
torch::Tensor rank_gradients(int rank, int step) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(uint64_t(1000 * step + rank));
  return torch::randn({24 * 16 + 16}, generator);
}

GradBucket make_bucket(torch::Tensor buffer) {
  GradBucket bucket{0, buffer, {}, true};
  bucket.gradients.push_back(buffer.narrow(0, 0, 24 * 16).view({24, 16}));
  bucket.gradients.push_back(buffer.narrow(0, 24 * 16, 16));
  return bucket;
}

torch::Tensor average_of_ranks(int world, int step) {
  torch::Tensor sum = torch::zeros({24 * 16 + 16});
  for (int r = 0; r < world; ++r) sum += rank_gradients(r, step);
  return sum / world;
}

// Runs `hook_of(rank)` for `steps` steps on `world` ranks; returns each rank's reduced buffers.
std::vector<std::vector<torch::Tensor>> reduce_with(
    int world, int steps, const std::function<std::unique_ptr<CommHook>()>& make_hook,
    std::vector<int64_t>* payload = nullptr,
    const std::function<void(int, int, CommHook&)>& after_step = {}) {
  std::vector<std::vector<torch::Tensor>> out(static_cast<size_t>(world));
  const auto errors = test::run_ranks(world, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    auto hook = make_hook();
    for (int s = 0; s < steps; ++s) {
      torch::Tensor buffer = rank_gradients(rank, s);
      GradBucket bucket = make_bucket(buffer);
      auto pending = hook->start(bucket, *group);
      pending->wait();
      if (payload && rank == 0) payload->push_back(pending->payload_bytes());
      out[size_t(rank)].push_back(buffer.clone());
      if (after_step) after_step(rank, s, *hook);
    }
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
  return out;
}

float max_abs(const torch::Tensor& t) { return t.abs().max().item<float>(); }

TEST(CommHook, Fp16AndBf16GiveTheAverageAtTheirPrecisionWithHalfTheBytes) {
  for (const std::string spec : {"fp16", "bf16"}) {
    std::vector<int64_t> payload;
    const auto got = reduce_with(
        3, 2, [&] { return make_comm_hook(spec); }, &payload);
    const double tolerance = spec == "fp16" ? 2e-3 : 2e-2;  // 11 and 8 significant bits
    for (int s = 0; s < 2; ++s) {
      const torch::Tensor expected = average_of_ranks(3, s);
      for (int r = 0; r < 3; ++r) {
        EXPECT_LT(max_abs(got[size_t(r)][size_t(s)] - expected), tolerance)
            << spec << " rank " << r;
        EXPECT_TRUE(torch::equal(got[size_t(r)][size_t(s)], got[0][size_t(s)])) << spec;
      }
    }
    EXPECT_EQ(payload[0], (24 * 16 + 16) * 2) << spec;
  }
}

TEST(CommHook, AllReduceGivesTheAverage) {
  const auto got = reduce_with(2, 1, [] { return make_comm_hook("allreduce"); });
  EXPECT_LT(max_abs(got[0][0] - average_of_ranks(2, 0)), 1e-6);
}

TEST(PowerSGD, FullRankApproximationIsTheAverage) {
  // Rank 16 spans the 24 x 16 matrix, so P Q^T is exactly the average (up to rounding).
  auto options = PowerSGDOptions()
                     .matrix_approximation_rank(16)
                     .start_iter(0)
                     .min_compression_rate(0.01)
                     .use_error_feedback(false);
  const auto got = reduce_with(2, 3, [&] { return std::make_unique<PowerSGDHook>(options); });
  for (int s = 0; s < 3; ++s) {
    EXPECT_LT(max_abs(got[0][size_t(s)] - average_of_ranks(2, s)), 1e-4) << "step " << s;
    EXPECT_TRUE(torch::equal(got[0][size_t(s)], got[1][size_t(s)]));
  }
}

TEST(PowerSGD, WarmUpStepsArePlainAllReduces) {
  auto options = PowerSGDOptions().start_iter(2);
  const auto got = reduce_with(2, 3, [&] { return std::make_unique<PowerSGDHook>(options); });
  for (int s = 0; s < 2; ++s) {
    EXPECT_LT(max_abs(got[0][size_t(s)] - average_of_ranks(2, s)), 1e-6) << "step " << s;
  }
  // The third step is compressed: rank 1, so no longer the average.
  EXPECT_GT(max_abs(got[0][2] - average_of_ranks(2, 2)), 1e-2);
}

TEST(PowerSGD, RankOneCompressesTheMatrixAndSendsTheVectorAsIs) {
  auto options = PowerSGDOptions().matrix_approximation_rank(1).start_iter(0);
  std::vector<int64_t> payload;
  const auto got = reduce_with(
      2, 1, [&] { return std::make_unique<PowerSGDHook>(options); }, &payload);
  const torch::Tensor matrix = got[0][0].narrow(0, 0, 24 * 16).view({24, 16});
  const torch::Tensor singular = std::get<1>(torch::svd(matrix));
  EXPECT_GT(singular[0].item<float>(), 1.0f);
  EXPECT_LT(singular[1].item<float>(), 1e-4f * singular[0].item<float>());  // rank one
  // The vector is all-reduced uncompressed: exactly the average.
  const torch::Tensor expected = average_of_ranks(2, 0);
  EXPECT_LT(max_abs(got[0][0].narrow(0, 24 * 16, 16) - expected.narrow(0, 24 * 16, 16)), 1e-6);
  // P (24) + Q (16) + the vector (16) floats instead of 400.
  EXPECT_EQ(payload[0], (24 + 16 + 16) * 4);
}

TEST(PowerSGD, ErrorFeedbackLosesNothingOverSteps) {
  // Per rank: what was applied over all steps plus the residual left = what was put in, so
  // averaged over ranks the applied updates miss only the average residual.
  auto options = PowerSGDOptions().matrix_approximation_rank(2).start_iter(0);
  const int world = 2, steps = 4;
  std::vector<torch::Tensor> residual(world);
  const auto got = reduce_with(
      world, steps, [&] { return std::make_unique<PowerSGDHook>(options); }, nullptr,
      [&](int rank, int step, CommHook& hook) {
        if (step == steps - 1) residual[size_t(rank)] = dynamic_cast<PowerSGDHook&>(hook).error(0);
      });
  for (int r = 0; r < world; ++r) {
    torch::Tensor applied = torch::zeros({24 * 16 + 16}), input = torch::zeros({24 * 16 + 16});
    for (int s = 0; s < steps; ++s) {
      applied += got[size_t(r)][size_t(s)];
      input += rank_gradients(r, s);
    }
    ASSERT_TRUE(residual[size_t(r)].defined());
    EXPECT_LT(max_abs(applied + residual[size_t(r)] - input), 1e-4) << "rank " << r;
  }
}

TEST(PowerSGD, OrthogonalizeGivesOrthonormalColumnsAndKeepsZeroColumnsZero) {
  torch::manual_seed(3);
  torch::Tensor m = torch::randn({10, 3});
  orthogonalize_columns(m);
  EXPECT_LT(max_abs(torch::mm(m.t(), m) - torch::eye(3)), 1e-5);
  torch::Tensor zero = torch::zeros({5, 1});
  orthogonalize_columns(zero);
  EXPECT_FALSE(zero.isnan().any().item<bool>());
}

TEST(CommHook, SpecsParseAndBadOnesNameTheChoices) {
  EXPECT_EQ(make_comm_hook("allreduce")->name(), "allreduce");
  EXPECT_EQ(make_comm_hook("fp16")->name(), "fp16");
  EXPECT_EQ(make_comm_hook("bf16")->name(), "bf16");
  EXPECT_EQ(make_comm_hook("powersgd")->name(), "powersgd:1");
  EXPECT_EQ(make_comm_hook("powersgd:4:10")->name(), "powersgd:4");
  for (const std::string bad : {"fp32", "powersgd:0", "powersgd:x", "powersgd:2:-1", "powersgdx"}) {
    try {
      make_comm_hook(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

TEST(CommHook, AProgramsOwnHookIsMadeByItsNameWithItsArguments) {
  struct Echo : CommHook {
    explicit Echo(std::string arguments) : arguments(std::move(arguments)) {}
    std::unique_ptr<PendingReduction> start(GradBucket& bucket, ProcessGroup& group) override {
      return AllReduceHook().start(bucket, group);
    }
    std::string name() const override { return "echo(" + arguments + ")"; }
    std::string arguments;
  };
  register_comm_hook_factory("echo",
                             [](const std::string& a) { return std::make_unique<Echo>(a); });
  EXPECT_EQ(make_comm_hook("echo:1:2")->name(), "echo(1:2)");
  EXPECT_EQ(make_comm_hook("echo")->name(), "echo()");
  EXPECT_EQ(comm_hook_names().back(), "echo");
  register_comm_hook_factory("echo",
                             [](const std::string&) { return std::make_unique<Echo>("x"); });
  EXPECT_EQ(make_comm_hook("echo:1")->name(), "echo(x)");  // replaced, not added
  EXPECT_EQ(comm_hook_names().size(), 5u);
  EXPECT_THROW(register_comm_hook_factory("a:b", {}), InvalidArgument);
}

TEST(CommHook, DdpWithFp16TrainsCloseToPlainAndReportsHalfTheBytes) {
  const int world = 2, steps = 6;
  std::vector<torch::Tensor> x, y;
  torch::manual_seed(7);
  for (int s = 0; s < steps; ++s) {
    x.push_back(torch::rand({2 * world, 3, 32, 32}));
    y.push_back(torch::randint(10, {2 * world}, torch::kLong));
  }
  torch::manual_seed(0);
  const auto initial = models::Net()->parameters();
  auto train = [&](const std::string& spec, ReducerStats& stats) {
    std::vector<torch::Tensor> weights;
    std::mutex mutex;
    const auto errors = test::run_ranks(world, [&](int rank, std::shared_ptr<ProcessGroup> group) {
      models::Net net;
      {
        torch::NoGradGuard no_grad;
        for (size_t i = 0; i < initial.size(); ++i) net->parameters()[i].copy_(initial[i]);
      }
      DistributedDataParallel ddp(net, group, DDPOptions().bucket_cap_mb(0.05));
      ddp.register_comm_hook(make_comm_hook(spec));
      torch::optim::SGD sgd(net->parameters(), 0.05);
      for (int s = 0; s < steps; ++s) {
        sgd.zero_grad();
        torch::nn::functional::cross_entropy(ddp.forward(x[size_t(s)].narrow(0, 2 * rank, 2)),
                                             y[size_t(s)].narrow(0, 2 * rank, 2))
            .backward();
        sgd.step();
      }
      if (rank == 0) {
        std::lock_guard<std::mutex> lock(mutex);
        stats = ddp.stats();
        for (const auto& p : net->parameters()) weights.push_back(p.detach().clone());
      }
    });
    for (const auto& e : errors) EXPECT_EQ(e, "");
    return weights;
  };
  ReducerStats plain_stats, fp16_stats, powersgd_stats;
  const auto plain = train("allreduce", plain_stats);
  const auto fp16 = train("fp16", fp16_stats);
  train("powersgd:1:2", powersgd_stats);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_LT(max_abs(plain[i] - fp16[i]), 1e-3);
  EXPECT_EQ(plain_stats.bytes_communicated_per_iteration, plain_stats.bytes_reduced_per_iteration);
  EXPECT_EQ(fp16_stats.bytes_communicated_per_iteration * 2,
            fp16_stats.bytes_reduced_per_iteration);
  EXPECT_LT(powersgd_stats.bytes_communicated_per_iteration * 4,
            powersgd_stats.bytes_reduced_per_iteration);
}

}  // namespace
}  // namespace ddp
