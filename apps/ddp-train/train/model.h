// "The model" as the training step sees it: the classifier wrapped in DDP when the ranks average
// their gradients, or bare (one rank, or the overhead bench's baselines). The step calls the
// same functions either way; which it is, is decided once, here.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include <torch/torch.h>

#include "ddp/ddp.h"
#include "ddp/join.h"
#include "ddp/models/classifier.h"
#include "ddp/precision.h"
#include "options.h"
#include "train/training_setup.h"

namespace ddp::train {

/// The model's forward pass (`forward`) under `precision`'s autocast, its logits returned in fp32
/// so that the loss and the accuracy are computed in fp32 whatever the precision.
template <class Forward>
torch::Tensor fp32_logits(torch::Device device, Precision precision, const Forward& forward) {
  Autocast autocast(device, precision);
  return forward().to(torch::kFloat);
}

/// --lockstep-baseline: the ranks wait for each other after every backward, through an
/// all-reduce of one float instead of the gradients: what keeping them in step costs by itself.
class LockstepBaseline {
 public:
  /// Starts the ranks in step, as DDP's constructor (its broadcast of the weights) does;
  /// otherwise the first step's wait would absorb their different start-up times.
  explicit LockstepBaseline(std::shared_ptr<ProcessGroup> group);
  /// Waits for every rank to get here; returns the seconds waited.
  double wait();

 private:
  std::shared_ptr<ProcessGroup> group_;
  torch::Tensor token_;
};

class TrainedModel {
 public:
  /// Wraps the set-up's model in DDP (broadcasting rank 0's weights) unless there is one rank
  /// or a benchmark baseline is asked for.
  TrainedModel(const TrainOptions& options, const TrainingSetup& setup);

  /// Wraps the model again over the set-up's group, which changed (--on-failure continue):
  /// rank 0's weights go to every rank.
  void regroup(const TrainOptions& options, const TrainingSetup& setup);

  /// The logits of a batch, in fp32, prepared for a synchronised backward.
  torch::Tensor forward(const torch::Tensor& images);

  /// After loss.backward(): the seconds this rank then waited for the others (the exposed part
  /// of the gradients' all-reduce, or the lockstep baseline's wait, which happens here).
  double exposed_wait_seconds();

  /// With DDP and --no-pad: a Join through which a rank out of batches shadows the others'
  /// steps, calling `shadow_step` after each; null otherwise.
  std::unique_ptr<Join> join_when_out_of_data(bool no_pad, std::function<void()> shadow_step);

  /// Gradient bytes one step hands to collectives (0 without DDP).
  int64_t bytes_communicated_per_step() const;

  models::ClassifierImpl& module() { return *module_; }

 private:
  std::shared_ptr<models::ClassifierImpl> module_;
  torch::Device device_;
  Precision precision_;
  std::optional<DistributedDataParallel<models::ClassifierImpl>> ddp_;
  std::optional<LockstepBaseline> lockstep_;
};

}  // namespace ddp::train
