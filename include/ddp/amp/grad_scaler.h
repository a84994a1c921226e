// Loss scaling for fp16 training, as torch.amp.GradScaler: the loss is multiplied by a scale
// before backward, so that small fp16 gradients do not flush to zero; the gradients are divided
// back before the optimizer's step, which is skipped when any of them, on any rank of `group`, is
// inf or NaN. The scale then halves after a skipped step and doubles after `growth_interval`
// clean ones. PyTorch's defaults and state, and LibTorch's own kernels
// (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_).
//
//   ddp::GradScaler scaler;                        // or GradScaler({}, group) across ranks
//   for (each batch) {
//     optimizer.zero_grad();
//     scaler.scale(loss_of(batch)).backward();
//     scaler.unscale_(optimizer);                  // optional: before clipping the gradients
//     torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
//     scaler.step(optimizer);                      // skipped on inf/NaN
//     scaler.update();
//   }
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>

#include <torch/torch.h>

#include "ddp/process_group.h"

namespace ddp {

struct GradScalerOptions {
  TORCH_ARG(double, init_scale) = 65536.0;  // 2^16
  TORCH_ARG(double, growth_factor) = 2.0;
  TORCH_ARG(double, backoff_factor) = 0.5;
  TORCH_ARG(int64_t, growth_interval) = 2000;  // clean steps before the scale grows
  TORCH_ARG(bool, enabled) = true;             // false: every call passes through
};

/// What a checkpoint keeps of a GradScaler (torch.amp.GradScaler.state_dict()'s "scale" and
/// "_growth_tracker"; the factors are the options').
struct GradScalerState {
  double scale = 65536.0;
  int64_t growth_tracker = 0;  // clean steps since the scale last changed
};

class GradScaler {
 public:
  /// `group`: the ranks whose inf/NaN skip the step together (needed where each rank holds
  /// different gradients, as under ZeRO or FSDP; harmless under DDP). Null: this rank alone.
  explicit GradScaler(GradScalerOptions options = {},
                      std::shared_ptr<ProcessGroup> group = nullptr);

  /// `loss` times the scale (on the loss's device, where the scale then lives).
  torch::Tensor scale(const torch::Tensor& loss);
  /// Divides `optimizer`'s gradients by the scale in place and notes whether any is inf or NaN
  /// (all-reduced over the group). At most once per optimizer between two update()s, before
  /// step(); fp16 gradients are refused (keep fp32 master weights, as PyTorch does).
  void unscale_(torch::optim::Optimizer& optimizer);
  /// unscale_() if not done yet, then optimizer.step() unless a gradient was inf or NaN.
  /// Returns whether the step ran.
  bool step(torch::optim::Optimizer& optimizer);
  /// After the step(s) of an iteration: the scale backs off if any step found inf/NaN, and
  /// grows after growth_interval clean iterations.
  void update();
  /// Sets the scale to `new_scale` instead.
  void update(double new_scale);

  double get_scale() const;  // the current scale (init_scale before the first scale())
  bool is_enabled() const { return options_.enabled(); }
  GradScalerState state() const;
  void load_state(const GradScalerState& state);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct PerOptimizer {
    Stage stage = Stage::kReady;
    torch::Tensor found_inf;  // 0-dim float32 on the scale's device: 1 when any was inf/NaN
  };
  void lazy_init(const torch::Device& device);

  GradScalerOptions options_;
  std::shared_ptr<ProcessGroup> group_;
  torch::Tensor scale_;           // 0-dim float32, made on the first scale()'s device
  torch::Tensor growth_tracker_;  // 0-dim int32, likewise
  GradScalerState pending_;       // load_state() before the first scale()
  std::unordered_map<const torch::optim::Optimizer*, PerOptimizer> optimizers_;
};

}  // namespace ddp
