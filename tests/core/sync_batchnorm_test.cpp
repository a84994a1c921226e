// SyncBatchNorm against one process on the whole batch: outputs, input and parameter gradients,
// running statistics; the ResNet under DDP with synchronised BatchNorm trains to the same
// weights as one process; and the converter's checks.
#include <gtest/gtest.h>

#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "ddp/ddp.h"
#include "ddp/error.h"
#include "ddp/models/resnet.h"
#include "ddp/sync_batchnorm.h"
#include "support/process.h"

namespace ddp {
namespace {

torch::Tensor random(std::vector<int64_t> shape, uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::randn(shape, generator) * 3 + 1;  // a mean and scale away from 0 and 1
}

float max_abs(const torch::Tensor& t) { return t.abs().max().item<float>(); }

// Ranks hold batches of different sizes: the statistics must weight them by their counts.
void expect_sync_equals_whole_batch(int world) {
  const int64_t channels = 4;
  std::vector<torch::Tensor> inputs, output_weights;
  for (int r = 0; r < world; ++r) {
    inputs.push_back(random({1 + r, channels, 5, 3}, uint64_t(10 + r)));
    output_weights.push_back(random({1 + r, channels, 5, 3}, uint64_t(50 + r)));
  }
  // One process, the whole batch, with torch::nn::BatchNorm2d.
  torch::nn::BatchNorm2d reference(channels);
  torch::Tensor whole = torch::cat(inputs).requires_grad_(true);
  torch::Tensor whole_out = reference(whole);
  (whole_out * torch::cat(output_weights)).sum().backward();

  const size_t n_ranks = static_cast<size_t>(world);
  std::vector<torch::Tensor> outs(n_ranks), input_grads(n_ranks), weight_grads(n_ranks),
      bias_grads(n_ranks), running_means(n_ranks), running_vars(n_ranks);
  const auto errors = test::run_ranks(world, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    SyncBatchNorm bn(channels);
    EXPECT_EQ(convert_sync_batchnorm(*bn, group), 1);
    torch::Tensor x = inputs[size_t(rank)].clone().requires_grad_(true);
    torch::Tensor out = bn(x);
    (out * output_weights[size_t(rank)]).sum().backward();
    outs[size_t(rank)] = out.detach();
    input_grads[size_t(rank)] = x.grad();
    weight_grads[size_t(rank)] = bn->weight.grad();
    bias_grads[size_t(rank)] = bn->bias.grad();
    running_means[size_t(rank)] = bn->running_mean.clone();
    running_vars[size_t(rank)] = bn->running_var.clone();
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
  int64_t offset = 0;
  torch::Tensor weight_grad_sum = torch::zeros({channels}),
                bias_grad_sum = torch::zeros({channels});
  for (int r = 0; r < world; ++r) {
    const int64_t n = inputs[size_t(r)].size(0);
    EXPECT_LT(max_abs(outs[size_t(r)] - whole_out.detach().narrow(0, offset, n)), 1e-5);
    // Each rank gets the gradient of the sum of every rank's loss, as one process would.
    EXPECT_LT(max_abs(input_grads[size_t(r)] - whole.grad().narrow(0, offset, n)), 1e-4);
    EXPECT_LT(max_abs(running_means[size_t(r)] - reference->running_mean), 1e-5);
    EXPECT_LT(max_abs(running_vars[size_t(r)] - reference->running_var), 1e-4);
    weight_grad_sum += weight_grads[size_t(r)];
    bias_grad_sum += bias_grads[size_t(r)];
    offset += n;
  }
  // Parameter gradients are each rank's own share; DDP's all-reduce adds them up.
  EXPECT_LT(max_abs(weight_grad_sum - reference->weight.grad()), 1e-3);
  EXPECT_LT(max_abs(bias_grad_sum - reference->bias.grad()), 1e-4);
}

TEST(SyncBatchNorm, TwoRanksEqualOneProcessOnTheWholeBatch) { expect_sync_equals_whole_batch(2); }
TEST(SyncBatchNorm, ThreeUnevenRanksEqualOneProcessOnTheWholeBatch) {
  expect_sync_equals_whole_batch(3);
}

TEST(SyncBatchNorm, WithoutAGroupItIsBatchNorm2dExactly) {
  torch::nn::BatchNorm2d reference(3);
  SyncBatchNorm bn(3);
  const torch::Tensor x = random({4, 3, 6, 6}, 1);
  for (int step = 0; step < 3; ++step) {
    EXPECT_TRUE(torch::equal(bn(x), reference(x)));
  }
  EXPECT_TRUE(torch::equal(bn->running_mean, reference->running_mean));
  EXPECT_TRUE(torch::equal(bn->running_var, reference->running_var));
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 3);
  bn->eval();
  reference->eval();
  EXPECT_TRUE(torch::equal(bn(x), reference(x)));
  // The same names, so state dicts of either load into the other.
  std::vector<std::string> ours, theirs;
  for (const auto& p : bn->named_parameters()) ours.push_back(p.key());
  for (const auto& p : bn->named_buffers()) ours.push_back(p.key());
  for (const auto& p : reference->named_parameters()) theirs.push_back(p.key());
  for (const auto& p : reference->named_buffers()) theirs.push_back(p.key());
  EXPECT_EQ(ours, theirs);
}

TEST(SyncBatchNorm, ConverterFindsEveryLayerAndNamesTorchBatchNormItCannotSwap) {
  models::ResNet resnet(3, 10);
  EXPECT_EQ(convert_sync_batchnorm(*resnet, nullptr), 1 + 3 * 2 * 2 + 2);
  torch::nn::Sequential plain(torch::nn::Conv2d(3, 4, 3), torch::nn::BatchNorm2d(4));
  try {
    convert_sync_batchnorm(*plain, nullptr);
    FAIL() << "a torch::nn::BatchNorm2d was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'1'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ddp::SyncBatchNorm"), std::string::npos) << e.what();
  }
}

TEST(SyncBatchNorm, ResNetUnderDdpEqualsOneProcessOnTheWholeBatch) {
  const int world = 2, per_rank = 3, steps = 4;
  std::vector<torch::Tensor> x, y;
  for (int s = 0; s < steps; ++s) {
    x.push_back(random({world * per_rank, 1, 12, 12}, uint64_t(100 + s)));
    auto generator = at::make_generator<at::CPUGeneratorImpl>(uint64_t(200 + s));
    y.push_back(torch::randint(10, {world * per_rank}, generator, torch::kLong));
  }
  auto sgd_options = torch::optim::SGDOptions(0.05).momentum(0.9);
  torch::manual_seed(0);
  models::ResNet single(1, 10, 1);
  const std::vector<torch::Tensor> initial = [&] {
    std::vector<torch::Tensor> v;
    for (const auto& p : single->parameters()) v.push_back(p.detach().clone());
    return v;
  }();
  torch::optim::SGD single_sgd(single->parameters(), sgd_options);
  for (int s = 0; s < steps; ++s) {
    single_sgd.zero_grad();
    torch::nn::functional::cross_entropy(single(x[size_t(s)]), y[size_t(s)]).backward();
    single_sgd.step();
  }
  std::vector<std::vector<torch::Tensor>> got(static_cast<size_t>(world));
  const auto errors = test::run_ranks(world, [&](int rank, std::shared_ptr<ProcessGroup> group) {
    models::ResNet model(1, 10, 1);
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < initial.size(); ++i) model->parameters()[i].copy_(initial[i]);
    }
    convert_sync_batchnorm(*model, group);
    DistributedDataParallel ddp(model, group);
    torch::optim::SGD sgd(model->parameters(), sgd_options);
    for (int s = 0; s < steps; ++s) {
      sgd.zero_grad();
      const auto xs = x[size_t(s)].narrow(0, rank * per_rank, per_rank);
      const auto ys = y[size_t(s)].narrow(0, rank * per_rank, per_rank);
      torch::nn::functional::cross_entropy(ddp.forward(xs), ys).backward();
      sgd.step();
    }
    for (const auto& p : model->parameters()) got[size_t(rank)].push_back(p.detach().clone());
    for (const auto& b : model->buffers()) got[size_t(rank)].push_back(b.detach().clone());
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
  std::vector<torch::Tensor> expected;
  for (const auto& p : single->parameters()) expected.push_back(p.detach());
  for (const auto& b : single->buffers()) expected.push_back(b.detach());
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(got[size_t(r)].size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_LT(max_abs(got[size_t(r)][i].to(torch::kDouble) - expected[i].to(torch::kDouble)),
                1e-4)
          << "rank " << r << " tensor " << i;
    }
  }
}

}  // namespace
}  // namespace ddp
