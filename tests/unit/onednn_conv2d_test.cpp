// onednn_conv2d(): the same convolution as torch::conv2d (stride 1, padding 1), forward and all
// three gradients, by either algorithm (Winograd within its rounding); torch::conv2d where
// oneDNN has no kernels.
#include "ddp/models/onednn_conv2d.h"

#include <algorithm>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "ddp/precision.h"

namespace ddp::models {
namespace {

struct Result {
  torch::Tensor out, grad_input, grad_weight, grad_bias;
};

// Output and gradients of sum(out * probe) through `conv`, for fresh leaves made from the inputs.
template <class Conv>
Result run(const Conv& conv, const torch::Tensor& input, const torch::Tensor& weight,
           const torch::Tensor& bias, const torch::Tensor& probe) {
  torch::Tensor x = input.detach().clone().requires_grad_(),
                w = weight.detach().clone().requires_grad_(),
                b = bias.detach().clone().requires_grad_();
  torch::Tensor out = conv(x, w, b);
  (out * probe).sum().backward();
  return {out.detach(), x.grad(), w.grad(), b.grad()};
}

torch::Tensor direct(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  return torch::conv2d(x, w, b, 1, 1);
}

// max |a - b| relative to max |b|.
double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

// Net's layers at batch 4: conv1 (3 to 64 channels on 32x32) or conv2 (64 to 128 on 16x16).
void expect_matches_torch(int64_t in, int64_t out, int64_t side, ConvAlgorithm algorithm,
                          torch::MemoryFormat format) {
  if (!onednn_conv2d_available(in, out, algorithm)) {
    GTEST_SKIP() << "no such oneDNN kernels here (needs oneDNN 2.x; Winograd needs AVX-512)";
  }
  torch::manual_seed(0);
  const torch::Tensor input = torch::rand({4, in, side, side}).contiguous(format);
  const torch::Tensor weight = (torch::randn({out, in, 3, 3}) * 0.05).contiguous(format);
  const torch::Tensor bias = torch::randn({out});
  const torch::Tensor probe = torch::randn({4, out, side, side});
  const auto ours = [algorithm](const torch::Tensor& x, const torch::Tensor& w,
                                const torch::Tensor& b) {
    return onednn_conv2d(x, w, b, algorithm);
  };
  const Result mine = run(ours, input, weight, bias, probe);
  const Result reference = run(direct, input, weight, bias, probe);
  EXPECT_TRUE(mine.out.is_contiguous(format)) << "the output keeps the input's memory format";
  // Direct sums in another order differ by ~1e-7 relative; Winograd F(4x4, 3x3) by ~1e-6.
  EXPECT_LT(relative_error(mine.out, reference.out), 1e-5);
  EXPECT_LT(relative_error(mine.grad_input, reference.grad_input), 1e-5);
  EXPECT_LT(relative_error(mine.grad_weight, reference.grad_weight), 1e-5);
  EXPECT_LT(relative_error(mine.grad_bias, reference.grad_bias), 1e-5);
}

TEST(OnednnConv2d, WinogradMatchesTorchConv2dChannelsLast) {
  expect_matches_torch(64, 128, 16, ConvAlgorithm::kWinograd, torch::MemoryFormat::ChannelsLast);
}

TEST(OnednnConv2d, WinogradMatchesTorchConv2dContiguous) {
  expect_matches_torch(64, 128, 16, ConvAlgorithm::kWinograd, torch::MemoryFormat::Contiguous);
}

TEST(OnednnConv2d, DirectMatchesTorchConv2dOnThreeChannels) {
  expect_matches_torch(3, 64, 32, ConvAlgorithm::kDirect, torch::MemoryFormat::ChannelsLast);
  expect_matches_torch(3, 64, 32, ConvAlgorithm::kDirect, torch::MemoryFormat::Contiguous);
}

// onednn_conv2d_blocked() against torch::conv2d: the input given in `in_layout` (4-d contiguous,
// 4-d channels-last, or blocked), the output blocked, the input's gradient in the input's layout.
enum class Given { kContiguous, kChannelsLast, kBlocked };

void expect_blocked_matches_torch(int64_t in, int64_t out, int64_t side, ConvAlgorithm algorithm,
                                  Given given) {
  torch::manual_seed(0);
  const torch::Tensor input = torch::rand({4, in, side, side});
  const torch::Tensor weight = torch::randn({out, in, 3, 3}) * 0.05, bias = torch::randn({out});
  const torch::Tensor probe = torch::randn({4, out, side, side});
  const torch::Tensor x = given == Given::kBlocked ? to_blocked(input)
                          : given == Given::kChannelsLast
                              ? input.contiguous(torch::MemoryFormat::ChannelsLast)
                              : input;
  if (!onednn_conv2d_blocked_applies(x, weight, bias, algorithm)) {
    GTEST_SKIP() << "no such oneDNN kernels here (needs oneDNN 2.x; Winograd needs AVX-512)";
  }
  const auto ours = [algorithm](const torch::Tensor& x, const torch::Tensor& w,
                                const torch::Tensor& b) {
    const torch::Tensor y = onednn_conv2d_blocked(x, w, b, algorithm);
    EXPECT_TRUE(y.dim() == 5 && y.size(4) == 16 && y.is_contiguous()) << "blocked: " << y.sizes();
    return from_blocked(y);
  };
  const Result mine = run(ours, x, weight, bias, probe);
  const Result reference = run(direct, input, weight, bias, probe);
  ASSERT_EQ(mine.out.sizes(), reference.out.sizes());
  EXPECT_LT(relative_error(mine.out, reference.out), 1e-5);
  const torch::Tensor grad_input =
      given == Given::kBlocked ? from_blocked(mine.grad_input) : mine.grad_input;
  EXPECT_LT(relative_error(grad_input, reference.grad_input), 1e-5);
  EXPECT_LT(relative_error(mine.grad_weight, reference.grad_weight), 1e-5);
  EXPECT_LT(relative_error(mine.grad_bias, reference.grad_bias), 1e-5);
}

TEST(OnednnConv2d, BlockedOutputFromImagesMatchesTorchConv2d) {
  // Net's conv1: three channels in, blocked out.
  expect_blocked_matches_torch(3, 64, 32, ConvAlgorithm::kDirect, Given::kContiguous);
  expect_blocked_matches_torch(3, 64, 32, ConvAlgorithm::kDirect, Given::kChannelsLast);
}

TEST(OnednnConv2d, BlockedInAndOutMatchesTorchConv2d) {
  // Net's conv2, by either algorithm, blocked in and out.
  expect_blocked_matches_torch(64, 128, 16, ConvAlgorithm::kDirect, Given::kBlocked);
  expect_blocked_matches_torch(64, 128, 16, ConvAlgorithm::kWinograd, Given::kBlocked);
}

TEST(OnednnConv2d, BlockedLayoutRoundTripsAndPlacesChannelsInBlocksOf16) {
  const torch::Tensor x = torch::arange(2 * 32 * 3 * 5, torch::kFloat).reshape({2, 32, 3, 5});
  const torch::Tensor blocked = to_blocked(x);
  EXPECT_EQ(blocked.sizes(), (std::vector<int64_t>{2, 2, 3, 5, 16}));
  EXPECT_TRUE(blocked.is_contiguous());
  // Element (n, c, h, w) at [n][c / 16][h][w][c % 16].
  EXPECT_EQ(blocked[1][1][2][4][3].item<float>(), x[1][16 + 3][2][4].item<float>());
  EXPECT_TRUE(torch::equal(from_blocked(blocked), x));
  EXPECT_THROW(to_blocked(torch::zeros({1, 3, 4, 4})), c10::Error);
  EXPECT_THROW(from_blocked(torch::zeros({1, 3, 4, 4})), c10::Error);
}

TEST(OnednnConv2d, ThreadsConvolvingAtOnceEachGetTheirOwnResult) {
  // Ranks may be threads of one process (as in these tests): the primitives are shared.
  if (!onednn_conv2d_available(64, 128, ConvAlgorithm::kWinograd)) GTEST_SKIP();
  torch::manual_seed(0);
  const torch::Tensor w = torch::randn({128, 64, 3, 3}) * 0.05, b = torch::randn({128});
  std::vector<torch::Tensor> inputs, expected;
  for (int t = 0; t < 4; ++t) {
    inputs.push_back(torch::rand({2, 64, 16, 16}).contiguous(torch::MemoryFormat::ChannelsLast));
    expected.push_back(direct(inputs.back(), w, b));
  }
  std::vector<double> worst(inputs.size(), 0.0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < inputs.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const torch::Tensor out = onednn_conv2d(inputs[t], w, b, ConvAlgorithm::kWinograd);
        worst[t] = std::max(worst[t], relative_error(out, expected[t]));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (size_t t = 0; t < inputs.size(); ++t) EXPECT_LT(worst[t], 1e-5) << "thread " << t;
}

TEST(OnednnConv2d, NoGradientForAnInputThatNeedsNone) {
  if (!onednn_conv2d_available(16, 16, ConvAlgorithm::kWinograd)) {
    GTEST_SKIP() << "no Winograd kernels here";
  }
  const torch::Tensor x = torch::rand({2, 16, 8, 8});  // as the first layer's images
  const torch::Tensor w = torch::randn({16, 16, 3, 3}).requires_grad_();
  const torch::Tensor b = torch::zeros({16}).requires_grad_();
  onednn_conv2d(x, w, b, ConvAlgorithm::kWinograd).sum().backward();
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(w.grad().defined());
  EXPECT_EQ(b.grad()[0].item<float>(), 2 * 8 * 8);  // d(sum)/d(bias) = N x H x W
}

TEST(OnednnConv2d, FallsBackToTorchConv2dWhereItHasNoKernels) {
  torch::manual_seed(0);
  // Three input channels (Net's conv1): not a multiple of 16, so no Winograd.
  const torch::Tensor x = torch::rand({2, 3, 8, 8}), w = torch::randn({8, 3, 3, 3}),
                      b = torch::randn({8});
  EXPECT_FALSE(onednn_conv2d_available(3, 8, ConvAlgorithm::kWinograd));
  EXPECT_TRUE(torch::equal(onednn_conv2d(x, w, b, ConvAlgorithm::kWinograd), direct(x, w, b)));
  // Another dtype: torch::conv2d's.
  EXPECT_EQ(onednn_conv2d(x.to(torch::kDouble), w.to(torch::kDouble), b.to(torch::kDouble),
                          ConvAlgorithm::kDirect)
                .scalar_type(),
            torch::kDouble);
  // Under bf16 autocast the convolution is autocast's (bf16), as torch::conv2d's would be.
  const torch::Tensor x64 = torch::rand({2, 64, 8, 8}), w64 = torch::randn({64, 64, 3, 3}),
                      b64 = torch::randn({64});
  Autocast bf16(torch::kCPU, Precision::kBf16);
  EXPECT_EQ(onednn_conv2d(x64, w64, b64, ConvAlgorithm::kWinograd).scalar_type(), torch::kBFloat16);
}

}  // namespace
}  // namespace ddp::models
