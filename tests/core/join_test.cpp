// Uneven inputs with ddp::Join: ranks with fewer batches shadow the others' collectives instead
// of hanging them. Against one process that averages, at every step, the gradients of the ranks
// that still had a batch (divided by the whole world, as PyTorch's Join does).
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "ddp/algorithms/comm_hook_registry.h"
#include "ddp/ddp.h"
#include "ddp/join.h"
#include "ddp/models/net.h"
#include "support/net_copy.h"
#include "support/process.h"

namespace ddp {
namespace {

constexpr int64_t kRows = 4;  // images per batch

// Rank r's batch s (a generator of its own: ranks are threads).
std::pair<torch::Tensor, torch::Tensor> batch(int rank, int step) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(uint64_t(100 * step + rank + 1));
  return {torch::rand({kRows, 1, 16, 16}, generator),
          torch::randint(10, {kRows}, generator, torch::kLong)};
}

torch::optim::SGD sgd(const models::Net& net) {
  return torch::optim::SGD(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
}

// One process: at step s, the sum of the active ranks' mean losses over the world size.
std::vector<torch::Tensor> single_process(const models::Net& initial,
                                          const std::vector<int>& batches) {
  models::Net net = test::copy_of(initial);
  auto optimizer = sgd(net);
  const int world = int(batches.size());
  const int steps = *std::max_element(batches.begin(), batches.end());
  for (int s = 0; s < steps; ++s) {
    optimizer.zero_grad();
    torch::Tensor loss = torch::zeros({});
    for (int r = 0; r < world; ++r) {
      if (s >= batches[size_t(r)]) continue;
      const auto [x, y] = batch(r, s);
      loss = loss + torch::nn::functional::cross_entropy(net->forward(x), y) / world;
    }
    loss.backward();
    optimizer.step();
  }
  std::vector<torch::Tensor> out;
  for (const auto& p : net->parameters()) out.push_back(p.detach().clone());
  return out;
}

// Trains rank r on its `batches[r]` batches inside a Join; returns each rank's final parameters
// and how many steps it shadowed.
std::vector<std::vector<torch::Tensor>> train_uneven(const models::Net& initial,
                                                     const std::vector<int>& batches,
                                                     bool shadow_optimizer_step,
                                                     std::vector<int64_t>& shadowed) {
  const int world = int(batches.size());
  std::vector<std::vector<torch::Tensor>> out(static_cast<size_t>(world));
  shadowed.assign(static_cast<size_t>(world), -1);
  const auto errors = test::run_ranks(world, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    models::Net net = test::copy_of(initial);
    DistributedDataParallel model(net, group);
    auto optimizer = sgd(net);
    std::function<void()> on_shadow;
    if (shadow_optimizer_step) on_shadow = [&] { optimizer.step(); };
    Join join(model, on_shadow);
    for (int s = 0; s < batches[size_t(rank)]; ++s) {
      const auto [x, y] = batch(rank, s);
      optimizer.zero_grad();
      torch::nn::functional::cross_entropy(model.forward(x), y).backward();
      optimizer.step();
    }
    shadowed[size_t(rank)] = join.join();
    for (const auto& p : net->parameters()) out[size_t(rank)].push_back(p.detach().clone());
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
  return out;
}

void expect_matches(const std::vector<std::vector<torch::Tensor>>& ranks,
                    const std::vector<torch::Tensor>& reference, const std::string& what) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    ASSERT_EQ(ranks[r].size(), reference.size()) << what << " rank " << r;
    for (size_t i = 0; i < reference.size(); ++i) {
      EXPECT_TRUE(torch::equal(ranks[r][i], ranks[0][i]))
          << what << ": rank " << r << " differs from rank 0 in parameter " << i;
      EXPECT_TRUE(torch::allclose(ranks[r][i], reference[i], 1e-4, 1e-6))
          << what << ": rank " << r << " parameter " << i << " max difference "
          << (ranks[r][i] - reference[i]).abs().max().item<double>();
    }
  }
}

class JoinTest : public ::testing::TestWithParam<std::vector<int>> {};

TEST_P(JoinTest, ShadowedOptimizerStepsKeepEveryRankEqualToOneProcess) {
  torch::manual_seed(0);
  const models::Net initial(1, 16, 10);
  const std::vector<int>& batches = GetParam();
  std::vector<int64_t> shadowed;
  const auto ranks = train_uneven(initial, batches, true, shadowed);
  expect_matches(ranks, single_process(initial, batches), "with on_shadow_step");
  const int most = *std::max_element(batches.begin(), batches.end());
  for (size_t r = 0; r < batches.size(); ++r) EXPECT_EQ(shadowed[r], most - batches[r]) << r;
}

TEST_P(JoinTest, WithoutShadowStepsEveryRankEndsWithTheLastJoinersWeights) {
  torch::manual_seed(1);
  const models::Net initial(1, 16, 10);
  std::vector<int64_t> shadowed;
  const auto ranks = train_uneven(initial, GetParam(), false, shadowed);
  expect_matches(ranks, single_process(initial, GetParam()), "without on_shadow_step");
}

INSTANTIATE_TEST_SUITE_P(BatchesPerRank, JoinTest,
                         ::testing::Values(std::vector<int>{4, 3, 2},  // a rank joins each step
                                           std::vector<int>{3, 1, 0},  // one rank has nothing
                                           std::vector<int>{2, 2}));   // even: nothing shadowed

// A model with BatchNorm buffers (broadcast each forward), gradient accumulation under
// no_sync() and the PowerSGD hook: the joined ranks shadow exactly the collectives the others
// make, so nobody hangs and every rank ends identical.
TEST(Join, ShadowsBufferBroadcastsNoSyncStepsAndCommHooks) {
  const std::vector<int> batches = {5, 3, 4};
  std::vector<std::vector<torch::Tensor>> out(3);
  const auto errors = test::run_ranks(3, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    torch::nn::Sequential net(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)),
                              torch::nn::BatchNorm2d(4), torch::nn::ReLU(), torch::nn::Flatten(),
                              torch::nn::Linear(4 * 14 * 14, 10));
    DistributedDataParallel model(net.ptr(), group);
    model.register_comm_hook(make_comm_hook("powersgd:1:2"));
    torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.05));
    Join join(model, [&] { optimizer.step(); });
    for (int s = 0; s < batches[size_t(rank)]; ++s) {
      optimizer.zero_grad();
      for (int micro = 0; micro < 2; ++micro) {
        const auto [x, y] = batch(rank, 2 * s + micro);
        auto step = [&, x = x, y = y] {
          torch::nn::functional::cross_entropy(model.forward(x), y).backward();
        };
        if (micro == 0) {
          auto guard = model.no_sync();
          step();
        } else {
          step();
        }
      }
      optimizer.step();
    }
    join.join();
    for (const auto& p : net->parameters()) out[size_t(rank)].push_back(p.detach().clone());
    for (const auto& b : net->buffers()) out[size_t(rank)].push_back(b.detach().clone());
  });
  for (int r = 0; r < 3; ++r) ASSERT_EQ(errors[size_t(r)], "") << "rank " << r;
  for (int r = 1; r < 3; ++r) {
    for (size_t i = 0; i < out[0].size(); ++i) {
      EXPECT_TRUE(torch::equal(out[size_t(r)][i], out[0][i])) << "rank " << r << " tensor " << i;
    }
  }
}

}  // namespace
}  // namespace ddp
