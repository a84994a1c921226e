// ZeroRedundancyOptimizer against the unsharded optimizer on the same ranks: the same weights
// with SGD (momentum) and Adam, about 1/W of the optimizer state per rank, and a consolidated
// state (for checkpoints) that resumes exactly.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "ddp/ddp.h"
#include "ddp/error.h"
#include "ddp/models/net.h"
#include "ddp/optim/zero.h"
#include "support/net_copy.h"
#include "support/process.h"

namespace ddp {
namespace {

struct Data {
  std::vector<torch::Tensor> x, y;
};

Data make_data(int steps, int64_t rows) {
  Data d;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(5);
  for (int s = 0; s < steps; ++s) {
    d.x.push_back(torch::rand({rows, 1, 16, 16}, generator));
    d.y.push_back(torch::randint(10, {rows}, generator, torch::kLong));
  }
  return d;
}

OptimizerFactory factory(const std::string& kind) {
  return [kind](std::vector<torch::Tensor> params) -> std::unique_ptr<torch::optim::Optimizer> {
    if (kind == "adam") {
      return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(1e-3));
    }
    return std::make_unique<torch::optim::SGD>(params,
                                               torch::optim::SGDOptions(0.05).momentum(0.9));
  };
}

// One training step of `ddp` on rank `rank`'s slice.
template <typename Step>
void train_step(DistributedDataParallel<models::NetImpl>& ddp, const Data& d, int s, int rank,
                int world, Step step) {
  const int64_t per_rank = d.x[size_t(s)].size(0) / world;
  torch::nn::functional::cross_entropy(
      ddp.forward(d.x[size_t(s)].narrow(0, rank * per_rank, per_rank)),
      d.y[size_t(s)].narrow(0, rank * per_rank, per_rank))
      .backward();
  step();
}

void expect_same_as_unsharded(const std::string& kind, int world) {
  const int steps = 5;
  const Data data = make_data(2 * steps, 2 * world);
  torch::manual_seed(0);
  const models::Net initial(1, 16, 10);
  test::TempDir dir;
  const std::string path = dir.path() + "/optimizer.pt";
  std::vector<int64_t> local_bytes(static_cast<size_t>(world));
  int64_t full_bytes = 0;
  const auto errors = test::run_ranks(world, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    models::Net sharded = test::copy_of(initial), plain = test::copy_of(initial);
    DistributedDataParallel ddp_sharded(sharded, group), ddp_plain(plain, group);
    ZeroRedundancyOptimizer zero(sharded->parameters(), group, factory(kind));
    auto reference = factory(kind)(plain->parameters());
    auto compare = [&](const char* when) {
      for (size_t i = 0; i < plain->parameters().size(); ++i) {
        EXPECT_TRUE(torch::equal(sharded->parameters()[i], plain->parameters()[i]))
            << kind << " rank " << rank << " parameter " << i << " " << when;
      }
    };
    for (int s = 0; s < steps; ++s) {
      zero.zero_grad();
      reference->zero_grad();
      train_step(ddp_sharded, data, s, rank, world, [&] { zero.step(); });
      train_step(ddp_plain, data, s, rank, world, [&] { reference->step(); });
    }
    compare("after training");
    local_bytes[size_t(rank)] = zero.local_state_bytes();
    if (rank == 0) full_bytes = optimizer_state_bytes(*reference);

    // Consolidate on rank 0, save, and resume every rank's shard from the file.
    auto full = zero.consolidate(0);
    EXPECT_EQ(full != nullptr, rank == 0);
    if (rank == 0) torch::save(*full, path);
    group->barrier();
    auto from_file = factory(kind)(sharded->parameters());
    torch::load(*from_file, path);
    ZeroRedundancyOptimizer resumed(sharded->parameters(), group, factory(kind));
    resumed.load_from_full(*from_file);
    for (int s = steps; s < 2 * steps; ++s) {
      resumed.zero_grad();
      reference->zero_grad();
      train_step(ddp_sharded, data, s, rank, world, [&] { resumed.step(); });
      train_step(ddp_plain, data, s, rank, world, [&] { reference->step(); });
    }
    compare("after resuming");
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
  // Every parameter's state is somewhere (the shards add up to the unsharded state).
  int64_t total = 0;
  for (int r = 0; r < world; ++r) total += local_bytes[size_t(r)];
  EXPECT_GT(double(total), 0.9 * double(full_bytes)) << kind;
}

TEST(ZeroRedundancyOptimizer, SgdWithMomentumOnTwoRanksEqualsUnsharded) {
  expect_same_as_unsharded("sgd", 2);
}
TEST(ZeroRedundancyOptimizer, AdamOnTwoRanksEqualsUnsharded) {
  expect_same_as_unsharded("adam", 2);
}
TEST(ZeroRedundancyOptimizer, AdamOnThreeRanksEqualsUnsharded) {
  expect_same_as_unsharded("adam", 3);
}

TEST(ZeroRedundancyOptimizer, EachRankKeepsAboutOneWthOfTheAdamState) {
  for (int world : {2, 3}) {
    std::vector<int64_t> local(static_cast<size_t>(world));
    int64_t full = 0;
    const auto errors = test::run_ranks(world, [&](int rank, std::shared_ptr<ProcessGroup> group) {
      torch::nn::Sequential model;
      for (int i = 0; i < 6; ++i) model->push_back(torch::nn::Linear(64, 64));
      ZeroRedundancyOptimizer zero(model->parameters(), group, factory("adam"));
      auto unsharded = factory("adam")(model->parameters());
      model->forward(torch::ones({1, 64})).sum().backward();
      zero.step();
      unsharded->step();
      local[size_t(rank)] = zero.local_state_bytes();
      if (rank == 0) full = optimizer_state_bytes(*unsharded);
    });
    for (const auto& e : errors) ASSERT_EQ(e, "");
    for (int r = 0; r < world; ++r) {
      EXPECT_LT(double(local[size_t(r)]), 1.1 * double(full) / world + 4096)
          << "world " << world << " rank " << r;
    }
  }
}

TEST(ZeroRedundancyOptimizer, PartitionIsBalancedAndMixedDtypesAreRefused) {
  const auto errors = test::run_ranks(2, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    models::Net net(3, 32, 10);
    ZeroRedundancyOptimizer zero(net->parameters(), group, factory("sgd"));
    int64_t owned[2] = {0, 0};
    const auto params = net->parameters();
    for (size_t i = 0; i < params.size(); ++i) owned[zero.owner_of(i)] += params[i].numel();
    EXPECT_LT(std::abs(double(owned[0] - owned[1])), 0.2 * double(owned[0] + owned[1]));
    std::vector<torch::Tensor> mixed = {torch::zeros({2}, torch::kFloat),
                                        torch::zeros({2}, torch::kDouble)};
    EXPECT_THROW(ZeroRedundancyOptimizer(mixed, group, factory("sgd")), InvalidArgument);
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

}  // namespace
}  // namespace ddp
