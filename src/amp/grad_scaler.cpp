#include "ddp/amp/grad_scaler.h"

#include <map>
#include <utility>

#include <c10/util/StringUtil.h>

#include "amp/scale_kernels.h"
#include "ddp/error.h"

namespace ddp {
namespace {

// An optimizer's gradients by device and dtype: LibTorch's kernel takes one list of each.
std::map<std::pair<std::string, c10::ScalarType>, std::vector<torch::Tensor>> gradients_of(
    torch::optim::Optimizer& optimizer) {
  std::map<std::pair<std::string, c10::ScalarType>, std::vector<torch::Tensor>> grads;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      const torch::Tensor& g = p.grad();
      if (!g.defined()) continue;
      if (g.scalar_type() == torch::kHalf) {
        throw InvalidArgument(
            "GradScaler: a gradient is fp16; unscaling it would lose what the scale saved. "
            "Keep the parameters (and so their gradients) in fp32 and run the forward in fp16 "
            "(autocast), as PyTorch requires");
      }
      if (g.is_sparse()) {
        throw InvalidArgument("GradScaler: sparse gradients are not supported");
      }
      grads[{g.device().str(), g.scalar_type()}].push_back(g);
    }
  }
  return grads;
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options, std::shared_ptr<ProcessGroup> group)
    : options_(std::move(options)), group_(std::move(group)) {
  if (!(options_.init_scale() > 0) || !(options_.growth_factor() > 1) ||
      !(options_.backoff_factor() > 0 && options_.backoff_factor() < 1) ||
      options_.growth_interval() < 1) {
    throw InvalidArgument(c10::str(
        "GradScaler: init_scale (", options_.init_scale(), ") must be > 0, growth_factor (",
        options_.growth_factor(), ") > 1, backoff_factor (", options_.backoff_factor(),
        ") in (0, 1) and growth_interval (", options_.growth_interval(), ") >= 1"));
  }
  pending_.scale = options_.init_scale();
}

void GradScaler::lazy_init(const torch::Device& device) {
  const auto on = torch::TensorOptions().device(device);
  scale_ = torch::full({}, pending_.scale, on.dtype(torch::kFloat32));
  growth_tracker_ = torch::full({}, pending_.growth_tracker, on.dtype(torch::kInt32));
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) {
  if (!options_.enabled()) return loss;
  if (!scale_.defined()) lazy_init(loss.device());
  return loss * scale_.to(loss.device(), /*non_blocking=*/true);
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled()) return;
  if (!scale_.defined()) {
    throw Error("GradScaler::unscale_() before scale(): scale the loss before backward");
  }
  PerOptimizer& state = optimizers_[&optimizer];
  if (state.stage == Stage::kUnscaled) {
    throw Error("GradScaler::unscale_() was already called on this optimizer since update()");
  }
  if (state.stage == Stage::kStepped) {
    throw Error("GradScaler::unscale_() after step(): call update() first");
  }
  // 1/scale in double, as PyTorch computes it.
  const torch::Tensor inv_scale = scale_.to(torch::kFloat64).reciprocal().to(torch::kFloat32);
  state.found_inf = torch::zeros({}, scale_.options().dtype(torch::kFloat32));
  for (auto& by_device : gradients_of(optimizer)) {
    std::vector<torch::Tensor>& grads = by_device.second;
    const torch::Device device = grads.front().device();
    torch::Tensor found = torch::zeros({}, torch::TensorOptions().device(device));
    amp::unscale(grads, found, inv_scale.to(device));
    state.found_inf += found.to(scale_.device());
  }
  if (group_ && group_->size() > 1) {
    // Every rank skips the step when any rank found inf/NaN.
    torch::Tensor any = state.found_inf.reshape({1}).clone();
    group_->allreduce_max(any).wait();
    state.found_inf.copy_(any.reshape({}));
  }
  state.stage = Stage::kUnscaled;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled()) {
    optimizer.step();
    return true;
  }
  PerOptimizer& state = optimizers_[&optimizer];
  if (state.stage == Stage::kStepped) {
    throw Error("GradScaler::step() was already called on this optimizer since update()");
  }
  if (state.stage == Stage::kReady) unscale_(optimizer);
  const bool clean = state.found_inf.item<float>() == 0;
  if (clean) optimizer.step();
  state.stage = Stage::kStepped;
  return clean;
}

void GradScaler::update() {
  if (!options_.enabled()) return;
  torch::Tensor found_inf;
  for (auto& [optimizer, state] : optimizers_) {
    if (!state.found_inf.defined()) continue;
    found_inf = found_inf.defined() ? found_inf + state.found_inf : state.found_inf.clone();
  }
  if (!found_inf.defined()) {
    throw Error("GradScaler::update() with no unscale_() or step() since the last update()");
  }
  amp::update_scale(scale_, growth_tracker_, found_inf, options_.growth_factor(),
                    options_.backoff_factor(), options_.growth_interval());
  optimizers_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled()) return;
  if (!scale_.defined()) {
    pending_.scale = new_scale;
  } else {
    scale_.fill_(new_scale);
  }
  optimizers_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled()) return 1.0;
  return scale_.defined() ? scale_.item<double>() : pending_.scale;
}

GradScalerState GradScaler::state() const {
  if (!scale_.defined()) return pending_;
  return {scale_.item<double>(), growth_tracker_.item<int64_t>()};
}

void GradScaler::load_state(const GradScalerState& state) {
  pending_ = state;
  if (scale_.defined()) {
    scale_.fill_(state.scale);
    growth_tracker_.fill_(state.growth_tracker);
  }
}

}  // namespace ddp
