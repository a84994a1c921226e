// The reference Net: initial weights bit-identical to Python's `torch.manual_seed(s); Net()`,
// parameter names as in Python, and the same logits on a fixed input.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "ddp/models/net.h"
#include "support/process.h"

namespace ddp {
namespace {

c10::Dict<c10::IValue, c10::IValue> load_python_state(const std::string& path) {
  const std::string bytes = test::read_file(path);
  return torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toGenericDict();
}

torch::Tensor fixed_input(int64_t channels, int64_t side) {
  return (torch::arange(2 * channels * side * side, torch::kFloat32).fmod(255) / 255)
      .reshape({2, channels, side, side});
}

void expect_matches_python(int seed, int64_t channels, int64_t side) {
  test::TempDir dir;
  const auto py = test::run_python("net_init.py", {dir / "net.pt", std::to_string(seed),
                                                   std::to_string(channels), std::to_string(side)});
  ASSERT_EQ(py.exit_code, 0) << py.output;
  const auto state = load_python_state(dir / "net.pt");

  torch::manual_seed(seed);
  models::Net net(channels, side);
  const auto params = net->named_parameters();
  ASSERT_EQ(params.size() + 1, state.size());  // + the logits entry
  for (const auto& p : params) {
    ASSERT_TRUE(state.contains(p.key())) << "Python has no " << p.key();
    const torch::Tensor expected = state.at(p.key()).toTensor();
    ASSERT_EQ(expected.sizes(), p.value().sizes()) << p.key();
    EXPECT_TRUE(torch::equal(expected, p.value())) << p.key() << " differs from Python's";
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = net->forward(fixed_input(channels, side));
  EXPECT_TRUE(torch::allclose(logits, state.at("logits").toTensor(), 1e-5, 1e-6));
}

TEST(Net, InitialWeightsEqualPythonsSeed0Cifar) { expect_matches_python(0, 3, 32); }
TEST(Net, InitialWeightsEqualPythonsSeed7Mnist) { expect_matches_python(7, 1, 28); }

// Net's forward (blocked oneDNN layers where built in) against the same function written with
// LibTorch's plain ops: the loss and every parameter's gradient.
void expect_matches_plain_ops(int64_t channels, int64_t side) {
  torch::manual_seed(0);
  models::Net net(channels, side);
  const torch::Tensor images = torch::rand({4, channels, side, side});
  const torch::Tensor labels = torch::tensor({1, 2, 3, 4});
  torch::nn::functional::cross_entropy(net->forward(images), labels).backward();

  std::vector<torch::Tensor> p;  // conv1.weight, conv1.bias, conv2..., fc...
  for (const auto& parameter : net->parameters()) {
    p.push_back(parameter.detach().clone().requires_grad_());
  }
  torch::Tensor x = torch::relu(torch::conv2d(images, p[0], p[1], 1, 1));
  x = torch::max_pool2d(x, 2, 2);
  x = torch::max_pool2d(torch::relu(torch::conv2d(x, p[2], p[3], 1, 1)), 2, 2);
  const torch::Tensor logits = torch::linear(torch::flatten(x, 1), p[4], p[5]);
  torch::nn::functional::cross_entropy(logits, labels).backward();

  const auto params = net->named_parameters();
  for (size_t i = 0; i < p.size(); ++i) {
    const torch::Tensor ours = params[i].value().grad(), expected = p[i].grad();
    // Winograd rounds differently from a direct sum, by ~1e-6 relative.
    const double error =
        (ours - expected).abs().max().item<double>() / expected.abs().max().item<double>();
    EXPECT_LT(error, 1e-4) << params[i].key();
  }
}

TEST(Net, GradientsEqualPlainLibTorchOpsCifar) { expect_matches_plain_ops(3, 32); }
TEST(Net, GradientsEqualPlainLibTorchOpsMnist) { expect_matches_plain_ops(1, 28); }

TEST(Net, SaysWhatComputesEachLayerAndNeverOnednnsReferenceLoop) {
  for (const auto& [channels, side] : {std::pair<int64_t, int64_t>{3, 32}, {1, 28}}) {
    const std::string kernels = models::Net(channels, side)->kernels();
    EXPECT_EQ(kernels.find("ref"), std::string::npos) << kernels;
    EXPECT_EQ(kernels.rfind("conv1: ", 0), 0u) << kernels;
    EXPECT_NE(kernels.find("; conv2: "), std::string::npos) << kernels;
    if (models::onednn_conv2d_available(64, 128, models::ConvAlgorithm::kDirect)) {
      EXPECT_NE(kernels.find("conv2: oneDNN jit"), std::string::npos) << kernels;
    }
  }
}

TEST(Net, ParameterNamesAreThePythonOnes) {
  models::Net net;
  std::vector<std::string> names;
  for (const auto& p : net->named_parameters()) names.push_back(p.key());
  EXPECT_EQ(names, (std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight",
                                             "conv2.bias", "fc.weight", "fc.bias"}));
}

TEST(Net, FlopsPerImageAreAbout121MillionTrainingCifar) {
  // forward + backward ≈ 3 x forward
  EXPECT_NEAR(3 * models::net_forward_flops(3, 32) / 1e6, 124.3, 0.5);
}

}  // namespace
}  // namespace ddp
