// onednn_conv2d(): the same convolution as torch::conv2d (stride 1, padding 1), forward and all
// three gradients, by either algorithm (Winograd within its rounding); torch::conv2d where
// oneDNN has no kernels.
#include "ddp/models/onednn_conv2d.h"

#include <algorithm>
#include <stdexcept>
#include <string>
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

TEST(OnednnConv2d, DirectMatchesTorchConv2dOnNetsConv2) {
  expect_matches_torch(64, 128, 16, ConvAlgorithm::kDirect, torch::MemoryFormat::ChannelsLast);
  expect_matches_torch(64, 128, 16, ConvAlgorithm::kDirect, torch::MemoryFormat::Contiguous);
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
    EXPECT_TRUE(y.dim() == 5 && y.size(4) == blocked_channels() && y.is_contiguous())
        << "blocked: " << y.sizes();
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
  // Net's conv2, blocked in and out.
  expect_blocked_matches_torch(64, 128, 16, ConvAlgorithm::kDirect, Given::kBlocked);
}

TEST(OnednnConv2d, BlockedInAndOutByWinogradMatchesTorchConv2d) {
  expect_blocked_matches_torch(64, 128, 16, ConvAlgorithm::kWinograd, Given::kBlocked);
}

TEST(OnednnConv2d, BlockedLayoutRoundTripsAndPlacesChannelsInBlocksOfThisCpu) {
  const int64_t b = blocked_channels();
  EXPECT_TRUE(b == 8 || b == 16) << b;
  const torch::Tensor x = torch::arange(2 * 32 * 3 * 5, torch::kFloat).reshape({2, 32, 3, 5});
  const torch::Tensor blocked = to_blocked(x);
  EXPECT_EQ(blocked.sizes(), (std::vector<int64_t>{2, 32 / b, 3, 5, b}));
  EXPECT_TRUE(blocked.is_contiguous());
  // Element (n, c, h, w) at [n][c / B][h][w][c % B].
  EXPECT_EQ(blocked[1][1][2][4][3].item<float>(), x[1][b + 3][2][4].item<float>());
  EXPECT_TRUE(torch::equal(from_blocked(blocked), x));
  EXPECT_THROW(to_blocked(torch::zeros({1, 3, 4, 4})), c10::Error);
  EXPECT_THROW(from_blocked(torch::zeros({1, 3, 4, 4})), c10::Error);
  EXPECT_THROW(from_blocked(torch::zeros({1, 3, 4, 4, 4})), c10::Error);
}

TEST(OnednnConv2d, NeverRunsOnednnsReferenceLoop) {
  // Net's layers and more, as training calls them: whatever computes them here is a jit kernel or
  // LibTorch (ref:any, oneDNN's fallback for what no kernel of this CPU takes, is ~1,000x slower).
  torch::manual_seed(0);
  const int64_t b = blocked_channels();
  const torch::Tensor w1 = torch::randn({64, 3, 3, 3}).requires_grad_(),
                      b1 = torch::randn({64}).requires_grad_();
  const torch::Tensor w2 = torch::randn({128, 64, 3, 3}).requires_grad_(),
                      b2 = torch::randn({128}).requires_grad_();
  const torch::Tensor images = torch::rand({4, 3, 32, 32}), grey = torch::rand({4, 1, 28, 28});
  const torch::Tensor w_grey = torch::randn({64, 1, 3, 3}).requires_grad_();
  const torch::Tensor hidden = torch::rand({4, 64 / b, 16, 16, b}).requires_grad_();
  for (const auto algorithm : {ConvAlgorithm::kDirect, ConvAlgorithm::kWinograd}) {
    for (const bool blocked : {false, true}) {
      for (const std::string& kernel :
           {onednn_conv2d_kernel(images, w1, b1, algorithm, blocked),
            onednn_conv2d_kernel(images.clone().requires_grad_(), w1, b1, algorithm, blocked),
            onednn_conv2d_kernel(grey, w_grey, b1, algorithm, blocked),
            onednn_conv2d_kernel(hidden, w2, b2, algorithm, true),
            onednn_conv2d_kernel(
                from_blocked(hidden.detach()).contiguous(torch::MemoryFormat::ChannelsLast), w2, b2,
                algorithm, blocked)}) {
        EXPECT_EQ(kernel.find("ref"), std::string::npos) << kernel;
        EXPECT_TRUE(kernel.rfind("oneDNN ", 0) == 0 || kernel.rfind("LibTorch (", 0) == 0)
            << kernel;
      }
    }
  }
}

// onednn_conv2d_blocked() of `input` (4-d) with every gradient, against torch::conv2d: oneDNN
// computes it where it has jit kernels for each pass, LibTorch where not, and the kernel named
// says which.
void expect_blocked_output_matches_torch(const torch::Tensor& input, int64_t out) {
  torch::manual_seed(0);
  const auto options = input.options();
  const torch::Tensor w = torch::randn({out, input.size(1), 3, 3}, options) * 0.1,
                      b = torch::randn({out}, options);
  const torch::Tensor probe =
      torch::randn({input.size(0), out, input.size(2), input.size(3)}, options);
  const torch::Tensor xg = input.clone().requires_grad_(), wg = w.clone().requires_grad_(),
                      bg = b.clone().requires_grad_();
  const bool onednn = onednn_conv2d_blocked_applies(xg, wg, bg, ConvAlgorithm::kDirect);
  const std::string kernel = onednn_conv2d_kernel(xg, wg, bg, ConvAlgorithm::kDirect, true);
  EXPECT_EQ(kernel.rfind(onednn ? "oneDNN jit" : "LibTorch (", 0), 0u) << kernel;
  const auto ours = [](const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
    const torch::Tensor y = onednn_conv2d_blocked(x, w, b, ConvAlgorithm::kDirect);
    EXPECT_EQ(y.size(4), blocked_channels());
    return from_blocked(y);
  };
  const Result mine = run(ours, input, w, b, probe);
  const Result reference = run(direct, input, w, b, probe);
  EXPECT_LT(relative_error(mine.out, reference.out), 1e-5) << kernel;
  EXPECT_LT(relative_error(mine.grad_input, reference.grad_input), 1e-5) << kernel;
  EXPECT_LT(relative_error(mine.grad_weight, reference.grad_weight), 1e-5) << kernel;
  EXPECT_LT(relative_error(mine.grad_bias, reference.grad_bias), 1e-5) << kernel;
}

TEST(OnednnConv2d, BlockedOutputMatchesTorchWhicheverComputesIt) {
  // A first layer with its input's gradient, which oneDNN 2.x often has only as its reference
  // loop; one grey channel (Fashion-MNIST), whose weight gradient it lacks on AVX2; and doubles,
  // which it does not take.
  expect_blocked_output_matches_torch(torch::rand({2, 3, 32, 32}), 64);
  expect_blocked_output_matches_torch(torch::rand({2, 1, 28, 28}), 64);
  expect_blocked_output_matches_torch(torch::rand({2, 3, 8, 8}, torch::kDouble), 16);
}

// Winograd where this CPU has it (AVX-512), else direct; skips where oneDNN has neither.
ConvAlgorithm fastest_algorithm(int64_t in, int64_t out) {
  if (onednn_conv2d_available(in, out, ConvAlgorithm::kWinograd)) return ConvAlgorithm::kWinograd;
  if (!onednn_conv2d_available(in, out, ConvAlgorithm::kDirect)) {
    throw std::runtime_error("no oneDNN kernels for this convolution here");
  }
  return ConvAlgorithm::kDirect;
}

TEST(OnednnConv2d, ThreadsConvolvingAtOnceEachGetTheirOwnResult) {
  // Ranks may be threads of one process (as in these tests): the primitives are shared.
  if (!onednn_conv2d_available(64, 128, ConvAlgorithm::kDirect)) GTEST_SKIP();
  const ConvAlgorithm algorithm = fastest_algorithm(64, 128);
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
        const torch::Tensor out = onednn_conv2d(inputs[t], w, b, algorithm);
        worst[t] = std::max(worst[t], relative_error(out, expected[t]));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (size_t t = 0; t < inputs.size(); ++t) EXPECT_LT(worst[t], 1e-5) << "thread " << t;
}

TEST(OnednnConv2d, NoGradientForAnInputThatNeedsNone) {
  if (!onednn_conv2d_available(16, 16, ConvAlgorithm::kDirect)) GTEST_SKIP() << "no oneDNN here";
  const ConvAlgorithm algorithm = fastest_algorithm(16, 16);
  const torch::Tensor x = torch::rand({2, 16, 8, 8});  // as the first layer's images
  const torch::Tensor w = torch::randn({16, 16, 3, 3}).requires_grad_();
  const torch::Tensor b = torch::zeros({16}).requires_grad_();
  onednn_conv2d(x, w, b, algorithm).sum().backward();
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
  // Under bf16 autocast the convolution is autocast's (bf16), as torch::conv2d's would be, where
  // this LibTorch convolves bf16 on this CPU: Debian 12's 1.13 (on oneDNN 2.6) does not below
  // AVX-512 ("could not create a primitive descriptor iterator").
  const torch::Tensor x64 = torch::rand({2, 64, 8, 8}), w64 = torch::randn({64, 64, 3, 3}),
                      b64 = torch::randn({64});
  Autocast bf16(torch::kCPU, Precision::kBf16);
  try {
    torch::conv2d(x64, w64, b64, 1, 1);
  } catch (const std::exception&) {  // 1.13 lets oneDNN's own dnnl::error through
    GTEST_SKIP() << "this LibTorch has no bf16 convolution for this CPU";
  }
  EXPECT_EQ(onednn_conv2d(x64, w64, b64, ConvAlgorithm::kWinograd).scalar_type(), torch::kBFloat16);
}

}  // namespace
}  // namespace ddp::models
