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
  const int64_t b = blocked_channels();
  ASSERT_EQ(ours.sizes(), (std::vector<int64_t>{3, channels / b, side / 2, side / 2, b}));
  EXPECT_EQ(blocked_max_pool2d_kernel(blocked).find("ref"), std::string::npos)
      << "oneDNN's reference loop: " << blocked_max_pool2d_kernel(blocked);
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

TEST(BlockedMaxPool2d, TheOtherBlockSizeIsPooledToo) {
  // Blocks of 16 on an AVX2 CPU (no jit kernel: LibTorch), or of 8 on an AVX-512 one.
  const int64_t other = blocked_channels() == 16 ? 8 : 16;
  const torch::Tensor input = torch::randn({2, 32, 6, 6});
  const torch::Tensor x =
      input.reshape({2, 32 / other, other, 6, 6}).permute({0, 1, 3, 4, 2}).contiguous();
  EXPECT_EQ(from_blocked(x).sizes(), input.sizes());
  EXPECT_TRUE(torch::equal(from_blocked(blocked_max_pool2d(x)), torch::max_pool2d(input, 2, 2)));
  const std::string kernel = blocked_max_pool2d_kernel(x);
  EXPECT_EQ(kernel.find("ref"), std::string::npos) << kernel;
}

TEST(BlockedMaxPool2d, RejectsATensorThatIsNotBlocked) {
  EXPECT_THROW(blocked_max_pool2d(torch::zeros({1, 16, 4, 4})), c10::Error);
  EXPECT_THROW(blocked_max_pool2d(torch::zeros({1, 4, 4, 4, 4})), c10::Error);
}

}  // namespace
}  // namespace ddp::models
