// torchvision's ResNets: a state dict written here loads into torchvision with strict=True and
// gives torchvision's logits; torchvision's state dict loads here, every tensor, with the same
// logits. The architecture is then torchvision's, name for name and number for number.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "ddp/checkpoint/checkpoint.h"
#include "ddp/error.h"
#include "ddp/models/classifier.h"
#include "ddp/models/torchvision_resnet.h"
#include "support/process.h"

namespace ddp::models {
namespace {

class TorchvisionResNetTest : public ::testing::TestWithParam<int> {};

// torchvision's logits for its own seeded input, from the weights in `weights`.
std::map<std::string, torch::Tensor> torchvision_logits(const std::string& weights, int depth,
                                                        int classes, const std::string& out) {
  const auto py =
      test::run_python("torchvision_resnet.py",
                       {"check", weights, std::to_string(depth), std::to_string(classes), out});
  EXPECT_EQ(py.exit_code, 0) << py.output;
  return read_state_dict(out);
}

TEST_P(TorchvisionResNetTest, ExportLoadsIntoTorchvisionWithItsLogits) {
  const int depth = GetParam();
  test::TempDir dir;
  torch::manual_seed(1);
  TorchvisionResNet model(depth, 10);
  export_state_dict(dir / "model.pt", *model);
  const auto reference = torchvision_logits(dir / "model.pt", depth, 10, dir / "logits.pt");
  ASSERT_TRUE(reference.count("logits"));
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = model->forward(reference.at("input"));
  EXPECT_TRUE(torch::allclose(logits, reference.at("logits"), 1e-4, 1e-4))
      << (logits - reference.at("logits")).abs().max();
}

TEST_P(TorchvisionResNetTest, TorchvisionStateDictLoadsEveryTensor) {
  const int depth = GetParam();
  test::TempDir dir;
  const auto py = test::run_python("torchvision_resnet.py",
                                   {"save", "3", std::to_string(depth), "7", dir / "tv.pt"});
  ASSERT_EQ(py.exit_code, 0) << py.output;
  const auto state = read_state_dict(dir / "tv.pt");
  TorchvisionResNet model(depth, 7);
  size_t tensors = model->named_parameters().size() + model->named_buffers().size();
  EXPECT_EQ(state.size(), tensors);
  load_state_dict(*model, state, "tv.pt");
  for (const auto& p : model->named_parameters()) {
    EXPECT_TRUE(torch::equal(p.value(), state.at(p.key()))) << p.key();
  }
  const auto reference = torchvision_logits(dir / "tv.pt", depth, 7, dir / "logits.pt");
  model->eval();
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(
      torch::allclose(model->forward(reference.at("input")), reference.at("logits"), 1e-4, 1e-4));
}

INSTANTIATE_TEST_SUITE_P(Depths, TorchvisionResNetTest, ::testing::Values(18, 50),
                         [](const auto& info) { return "ResNet" + std::to_string(info.param); });

TEST(TorchvisionResNet, ByNameAndFlops) {
  auto model = make_classifier("resnet18", 3, 224, 1000);
  int64_t count = 0;
  for (const auto& p : model->parameters()) count += p.numel();
  EXPECT_EQ(count, 11689512);  // torchvision's resnet18: 11,689,512 parameters
  auto r50 = make_classifier("resnet50", 3, 224, 1000);
  count = 0;
  for (const auto& p : r50->parameters()) count += p.numel();
  EXPECT_EQ(count, 25557032);  // resnet50: 25,557,032
  // 1.82 and 4.11 GMACs at 224 (torchvision's model cards: 1.81 and 4.09 GFLOPS as MACs).
  EXPECT_NEAR(torchvision_resnet_forward_flops(18, 224, 1000) / 2e9, 1.82, 0.02);
  EXPECT_NEAR(torchvision_resnet_forward_flops(50, 224, 1000) / 2e9, 4.11, 0.03);
  EXPECT_THROW(make_classifier("resnet18", 3, 16, 10), InvalidArgument);
}

}  // namespace
}  // namespace ddp::models
