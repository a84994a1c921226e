// The GPT as the training loop sees it: replicated under DDP or sharded under FSDP, with one
// face (forward, gradient sync on or off, clipping, the optimizer's parameter groups, the whole
// model's weights), so that the loop is written once, as nanoGPT's train.py is.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "ddp/ddp.h"
#include "ddp/fsdp/fully_shard.h"
#include "ddp/models/gpt.h"
#include "options.h"

namespace ddp::train {

class ParallelGPT {
 public:
  /// Wraps `gpt` as `options.parallel` says over `group` (bare when it is null: one rank).
  ParallelGPT(models::GPT gpt, const TrainOptions& options, std::shared_ptr<ProcessGroup> group);

  torch::Tensor forward(const torch::Tensor& tokens);
  /// Off: the next backward passes keep their gradients local (gradient accumulation).
  void set_gradient_sync(bool sync);
  /// Clips the gradients' global norm to `max_norm`; returns the norm before.
  double clip_grad_norm(double max_norm);

  /// What the optimizer steps: the parameters (the tied weight once), or under FSDP this rank's
  /// shards of them.
  std::vector<torch::Tensor> parameters() const;
  /// The same split as nanoGPT's configure_optimizers: those of two or more dimensions (weights,
  /// which decay), then the rest (biases and LayerNorms, which do not).
  std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> decay_and_no_decay() const;

  /// The whole model's weights by nanoGPT's names (collective under FSDP).
  std::map<std::string, torch::Tensor> full_state_dict();
  /// The bytes this rank holds for parameters and their gradients.
  int64_t parameter_and_gradient_bytes() const;
  /// FSDP: the most bytes of gathered parameters and full gradients held at once (else 0).
  int64_t peak_unsharded_bytes() const;

  /// Whether the model is sharded (FSDP computes in its mixed-precision policy's dtype, not
  /// under autocast).
  bool sharded() const { return fsdp_.has_value(); }
  models::GPTImpl& module() { return *gpt_; }
  void train(bool on) { gpt_->train(on); }

 private:
  /// (name, tensor the optimizer steps) in nanoGPT's order, the tied weight once.
  std::vector<std::pair<std::string, torch::Tensor>> trained_parameters() const;

  models::GPT gpt_;
  std::optional<DistributedDataParallel<models::GPTImpl>> ddp_;
  std::optional<FullyShardedDataParallel<models::GPTImpl>> fsdp_;
  std::optional<NoSyncGuard> no_sync_;  // DDP with sync off
};

}  // namespace ddp::train
