// ddp::Autocast: inside the scope convolutions and linear layers compute in bfloat16, outside
// they are fp32 again; scopes nest and restore; fp32 leaves autocast off.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "ddp/error.h"
#include "ddp/precision.h"

namespace ddp {
namespace {

torch::Tensor conv_output() {
  return torch::conv2d(torch::ones({1, 2, 4, 4}), torch::ones({3, 2, 3, 3}));
}

TEST(Autocast, Bf16ScopeRunsConvolutionsInBf16AndEndsCleanly) {
  EXPECT_EQ(conv_output().scalar_type(), torch::kFloat);
  {
    Autocast bf16(torch::kCPU, Precision::kBf16);
    EXPECT_EQ(conv_output().scalar_type(), torch::kBFloat16);
    EXPECT_EQ(torch::nn::Linear(2, 3)->forward(torch::ones({1, 2})).scalar_type(),
              torch::kBFloat16);
    {
      Autocast inner(torch::kCPU, Precision::kBf16);
      EXPECT_EQ(conv_output().scalar_type(), torch::kBFloat16);
    }
    EXPECT_EQ(conv_output().scalar_type(), torch::kBFloat16) << "the inner scope ended it early";
  }
  EXPECT_EQ(conv_output().scalar_type(), torch::kFloat);
}

TEST(Autocast, Fp32ScopeLeavesAutocastOff) {
  Autocast fp32(torch::kCPU, Precision::kFp32);
  EXPECT_EQ(conv_output().scalar_type(), torch::kFloat);
}

TEST(Autocast, GradientsOfFp32ParametersStayFp32) {
  torch::nn::Linear layer(4, 2);
  torch::Tensor loss;
  {
    Autocast bf16(torch::kCPU, Precision::kBf16);
    loss = layer->forward(torch::ones({3, 4})).to(torch::kFloat).sum();
  }
  loss.backward();
  EXPECT_EQ(layer->weight.grad().scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::allclose(layer->weight.grad(), torch::full({2, 4}, 3.0f)));
}

TEST(Precision, ParsesItsNamesAndRejectsOthers) {
  EXPECT_EQ(parse_precision("fp32"), Precision::kFp32);
  EXPECT_EQ(parse_precision("bf16"), Precision::kBf16);
  EXPECT_EQ(parse_precision("fp16"), Precision::kFp16);
  EXPECT_EQ(to_string(Precision::kBf16), "bf16");
  EXPECT_EQ(to_string(Precision::kFp16), "fp16");
  EXPECT_THROW(parse_precision("fp8"), InvalidArgument);
}

}  // namespace
}  // namespace ddp
