// blocked_max_pool2d(): torch::max_pool2d(x, 2, 2) of the activation a blocked tensor holds,
// forward and gradient exactly (a max-pool only picks and routes values).
#include "ddp/models/onednn_max_pool2d.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "ddp/models/onednn_conv2d.h"

namespace ddp::models {
namespace {

void expect_matches_torch(int64_t channels, int64_t side) {
  torch::manual_seed(0);
  const torch::Tensor input = torch::randn({3, channels, side, side});
  const torch::Tensor probe = torch::randn({3, channels, side / 2, side / 2});

  const torch::Tensor blocked = to_blocked(input).requires_grad_();
  const torch::Tensor ours = blocked_max_pool2d(blocked);
  ASSERT_EQ(ours.sizes(), (std::vector<int64_t>{3, channels / 16, side / 2, side / 2, 16}));
  (from_blocked(ours) * probe).sum().backward();

  const torch::Tensor plain = input.clone().requires_grad_();
  const torch::Tensor expected = torch::max_pool2d(plain, 2, 2);
  (expected * probe).sum().backward();

  EXPECT_TRUE(torch::equal(from_blocked(ours.detach()), expected.detach()));
  EXPECT_TRUE(torch::equal(from_blocked(blocked.grad()), plain.grad()));
}

TEST(BlockedMaxPool2d, MatchesTorchMaxPool2dOnNetsShapes) {
  expect_matches_torch(64, 32);   // after conv1 on CIFAR-10
  expect_matches_torch(128, 16);  // after conv2
  expect_matches_torch(128, 14);  // after conv2 on 28 x 28 images
}

TEST(BlockedMaxPool2d, OddSidesDropTheLastRowAndColumnAsTorchDoes) { expect_matches_torch(16, 7); }

TEST(BlockedMaxPool2d, OtherDtypesGoThroughLibTorch) {
  const torch::Tensor x = to_blocked(torch::randn({2, 16, 4, 4}, torch::kDouble));
  EXPECT_EQ(blocked_max_pool2d(x).scalar_type(), torch::kDouble);
  EXPECT_TRUE(
      torch::equal(from_blocked(blocked_max_pool2d(x)), torch::max_pool2d(from_blocked(x), 2, 2)));
}

TEST(BlockedMaxPool2d, RejectsATensorThatIsNotBlocked) {
  EXPECT_THROW(blocked_max_pool2d(torch::zeros({1, 16, 4, 4})), c10::Error);
}

}  // namespace
}  // namespace ddp::models
