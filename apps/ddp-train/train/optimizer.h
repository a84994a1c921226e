// "The optimizer" as training sees it: SGD or Adam over all the parameters, or with --zero each
// rank keeping the state of its shard only (ZeRO stage 1), with the learning-rate schedule, and
// under --precision fp16 the loss scaling (GradScaler). The call sites (backward, step,
// checkpoint, resume) are the same either way; which it is, is decided here.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <torch/torch.h>

#include "ddp/amp/grad_scaler.h"
#include "ddp/checkpoint/async_checkpoint.h"
#include "ddp/checkpoint/checkpoint.h"
#include "ddp/optim/zero.h"
#include "ddp/process_group.h"
#include "options.h"

namespace ddp::train {

/// The learning rate for optimizer step `step` (0-based, counted over the whole run): a linear
/// warm-up over the first --warmup-epochs, then constant or a half cosine down to 0 at the end.
double scheduled_lr(const TrainOptions& options, int64_t step, int64_t steps_per_epoch);

class TrainOptimizer {
 public:
  /// Over `model`'s parameters; sharded over `group`'s ranks with --zero (and a group).
  TrainOptimizer(const TrainOptions& options, torch::nn::Module& model,
                 std::shared_ptr<ProcessGroup> group, int64_t steps_per_epoch);

  /// `loss` as backward() should see it: times the loss scale under --precision fp16.
  torch::Tensor scaled(const torch::Tensor& loss);
  /// Optimizer step number `global_step` (0-based) at the scheduled learning rate. Under
  /// --precision fp16 the gradients are unscaled first, and a step whose gradients overflowed
  /// is skipped (the scale backs off): returns whether the weights were updated.
  bool step(int64_t global_step);
  /// Whether backward runs on a scaled loss (--precision fp16): the loss scaler, not --on-nan,
  /// deals with gradients that overflow.
  bool scales_loss() const { return scaler_.has_value(); }
  /// The loss scale (1 without loss scaling).
  double loss_scale() const { return scaler_ ? scaler_->get_scale() : 1.0; }
  void zero_grad();
  /// The learning rate of the last step (--lr before the first).
  double lr() const { return lr_; }
  /// The epoch length the learning-rate schedule counts with (a newcomer takes rank 0's).
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  void set_steps_per_epoch(int64_t steps) { steps_per_epoch_ = steps; }

  /// Loads the weights into `model` and this optimizer's state (its shard's, sharded) from a
  /// checkpoint every rank reads.
  CheckpointState load(const std::string& path, torch::nn::Module& model);
  /// Every rank calls it (sharded state is gathered on rank 0 first); rank 0 writes `path`.
  void save(const std::string& path, const torch::nn::Module& model, const CheckpointState& state,
            bool is_root);
  /// The same, written by `writer` in the background after a copy into host memory.
  void save_async(AsyncCheckpointWriter& writer, const std::string& path,
                  const torch::nn::Module& model, const CheckpointState& state, bool is_root);

  /// This rank's optimizer state in bytes (its shard's, sharded).
  int64_t local_state_bytes() const;
  bool sharded() const { return zero_.has_value(); }

 private:
  TrainOptions options_;
  OptimizerFactory make_;
  std::vector<torch::Tensor> parameters_;
  std::unique_ptr<torch::optim::Optimizer> plain_;
  std::optional<ZeroRedundancyOptimizer> zero_;
  std::optional<GradScaler> scaler_;  // --precision fp16
  int64_t steps_per_epoch_;
  double lr_;
};

}  // namespace ddp::train
