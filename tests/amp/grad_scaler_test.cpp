// GradScaler against torch.amp.GradScaler over 200 steps (the same losses, skipped steps, scales
// and final weights), its composite kernels (LibTorch before 2.3 on CPU) against LibTorch's,
// its misuse refused as PyTorch refuses it, and a step skipped on every rank when one overflows.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <torch/torch.h>

#include "amp/scale_kernels.h"
#include "ddp/amp/grad_scaler.h"
#include "ddp/error.h"
#include "support/process.h"

namespace ddp {
namespace {

TEST(GradScaler, MatchesTorchAmpGradScalerOver200Steps) {
  if (!DDP_TORCH_AT_LEAST(2, 3)) {
    GTEST_SKIP() << "the reference, torch.amp.GradScaler on the CPU, needs PyTorch 2.3";
  }
  test::TempDir dir;
  const auto py = test::run_python("grad_scaler_golden.py", {dir / "golden.txt"});
  ASSERT_EQ(py.exit_code, 0) << py.output;
  std::ifstream golden(dir / "golden.txt");

  torch::set_num_threads(1);
  torch::manual_seed(0);
  torch::Tensor weight = (torch::randn({4, 8}) * 0.1).requires_grad_();
  torch::Tensor bias = torch::zeros({4}, torch::requires_grad());
  torch::optim::SGD optimizer({weight, bias}, torch::optim::SGDOptions(0.05).momentum(0.9));
  GradScaler scaler(GradScalerOptions().init_scale(1024).growth_interval(10));
  int skipped = 0, grown = 0;
  for (int step = 0; step < 200; ++step) {
    torch::Tensor x = torch::randn({16, 8});
    const torch::Tensor y = torch::randn({16, 4});
    if (step % 37 == 5) x[0][0] = std::numeric_limits<float>::infinity();
    optimizer.zero_grad();
    const torch::Tensor loss = torch::mse_loss(torch::matmul(x, weight.t()) + bias, y);
    scaler.scale(loss).backward();
    scaler.unscale_(optimizer);
    torch::nn::utils::clip_grad_norm_(std::vector<torch::Tensor>{weight, bias}, 1.0);
    const double before = scaler.get_scale();
    const bool stepped = scaler.step(optimizer);
    scaler.update();

    std::string line;
    ASSERT_TRUE(std::getline(golden, line)) << "golden file ends before step " << step;
    std::istringstream want(line);
    int want_step = 0, want_stepped = 0;
    double want_loss = 0, want_scale = 0;
    int64_t want_tracker = 0;
    std::string loss_text;
    want >> want_step >> loss_text >> want_stepped >> want_scale >> want_tracker;
    want_loss = std::stod(loss_text);
    ASSERT_EQ(want_step, step);
    ASSERT_EQ(int(stepped), want_stepped) << "step " << step;
    ASSERT_EQ(scaler.get_scale(), want_scale) << "step " << step;
    ASSERT_EQ(scaler.state().growth_tracker, want_tracker) << "step " << step;
    const double got = loss.item<double>();
    if (std::isfinite(want_loss)) {
      ASSERT_NEAR(got, want_loss, 1e-5 * std::abs(want_loss)) << "step " << step;
    } else {
      ASSERT_FALSE(std::isfinite(got)) << "step " << step;
    }
    skipped += stepped ? 0 : 1;
    grown += scaler.get_scale() > before ? 1 : 0;
  }
  EXPECT_EQ(skipped, 6);  // steps 5, 42, 79, 116, 153, 190
  EXPECT_GT(grown, 5);
  std::string line;
  ASSERT_TRUE(std::getline(golden, line));
  std::istringstream want(line);
  std::string label;
  want >> label;
  const torch::Tensor values = torch::cat({weight.detach().flatten(), bias.detach()});
  for (int64_t i = 0; i < values.numel(); ++i) {
    double v = 0;
    ASSERT_TRUE(want >> v);
    EXPECT_NEAR(values[i].item<double>(), v, 1e-6) << "parameter value " << i;
  }
}

// The composite kernels that stand in for LibTorch's before 2.3 give LibTorch's results.
TEST(GradScaler, CompositeKernelsMatchLibTorchs) {
  if (!DDP_TORCH_AT_LEAST(2, 3)) GTEST_SKIP() << "LibTorch before 2.3 has no CPU kernels";
  for (const float bad : {0.0f, std::numeric_limits<float>::infinity(), NAN}) {
    torch::manual_seed(3);
    std::vector<torch::Tensor> a = {torch::randn({5, 3}), torch::randn({7})};
    a[1][2] = bad == 0 ? a[1][2].item<float>() : bad;
    std::vector<torch::Tensor> b = {a[0].clone(), a[1].clone()};
    torch::Tensor found_a = torch::zeros({}), found_b = torch::zeros({});
    const torch::Tensor inv = torch::full({}, 1.0f / 256);
    torch::_amp_foreach_non_finite_check_and_unscale_(a, found_a, inv);
    amp::unscale_composite(b, found_b, inv);
    EXPECT_EQ(found_a.item<float>(), found_b.item<float>());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(torch::equal(a[i].nan_to_num(), b[i].nan_to_num()));
  }
  // Growth after `interval` clean steps, back-off on inf, and growth that would overflow.
  for (const auto& [start, found, tracker, interval] :
       std::vector<std::tuple<float, float, int, int>>{
           {1024, 0, 0, 3}, {1024, 0, 2, 3}, {1024, 1, 2, 3}, {3e38f, 0, 0, 1}}) {
    torch::Tensor scale_a = torch::full({}, start), scale_b = scale_a.clone();
    torch::Tensor track_a = torch::full({}, tracker, torch::kInt32), track_b = track_a.clone();
    const torch::Tensor found_inf = torch::full({}, found);
    torch::_amp_update_scale_(scale_a, track_a, found_inf, 2.0, 0.5, interval);
    amp::update_scale_composite(scale_b, track_b, found_inf, 2.0, 0.5, interval);
    EXPECT_EQ(scale_a.item<float>(), scale_b.item<float>()) << start << " " << found;
    EXPECT_EQ(track_a.item<int>(), track_b.item<int>()) << start << " " << found;
  }
}

// What PyTorch refuses, refused with a message: the order of unscale_, step and update.
TEST(GradScaler, RefusesMisuse) {
  torch::Tensor w = torch::ones({2}, torch::requires_grad());
  torch::optim::SGD optimizer({w}, torch::optim::SGDOptions(0.1));
  GradScaler scaler;
  EXPECT_THROW(scaler.unscale_(optimizer), Error);  // before scale()
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  scaler.scale(w.sum()).backward();
  scaler.unscale_(optimizer);
  EXPECT_THROW(scaler.unscale_(optimizer), Error);
  EXPECT_TRUE(scaler.step(optimizer));
  EXPECT_THROW(scaler.step(optimizer), Error);
  EXPECT_THROW(scaler.unscale_(optimizer), Error);
  scaler.update();
  EXPECT_THROW(scaler.update(), Error);  // nothing recorded since
  EXPECT_THROW(GradScaler(GradScalerOptions().backoff_factor(1.5)), InvalidArgument);
  torch::Tensor h = torch::ones({2}, torch::dtype(torch::kHalf).requires_grad(true));
  torch::optim::SGD half({h}, torch::optim::SGDOptions(0.1));
  scaler.scale(h.sum().to(torch::kFloat32)).backward();
  EXPECT_THROW(scaler.unscale_(half), InvalidArgument);  // fp16 gradients
  // Disabled: everything passes through.
  GradScaler off(GradScalerOptions().enabled(false));
  EXPECT_TRUE(torch::equal(off.scale(w.sum()), w.sum()));
  EXPECT_TRUE(off.step(optimizer));
  EXPECT_EQ(off.get_scale(), 1.0);
  // The state round-trips.
  GradScaler other;
  other.load_state({512.0, 7});
  EXPECT_EQ(other.get_scale(), 512.0);
  other.scale(w.sum());
  EXPECT_EQ(other.state().scale, 512.0);
  EXPECT_EQ(other.state().growth_tracker, 7);
}

// An inf on one rank only (each rank's own gradients, as under ZeRO or FSDP): every rank skips
// the step and backs off.
TEST(GradScaler, SkipsTheStepOnEveryRankWhenOneRankOverflows) {
  const auto errors = test::run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> group) {
    torch::Tensor w = torch::ones({3}, torch::requires_grad());
    torch::optim::SGD optimizer({w}, torch::optim::SGDOptions(0.1));
    GradScaler scaler(GradScalerOptions().init_scale(8), group);
    const float factor = rank == 1 ? std::numeric_limits<float>::infinity() : 1.0f;
    scaler.scale((w * factor).sum()).backward();
    if (scaler.step(optimizer)) throw std::runtime_error("the step ran");
    scaler.update();
    if (scaler.get_scale() != 4) throw std::runtime_error("no back-off");
    if (!torch::equal(w.detach(), torch::ones({3}))) throw std::runtime_error("weights moved");
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

}  // namespace
}  // namespace ddp
