// SyncBatchNorm for the C++ API: batch normalisation whose batch statistics are taken over every
// rank's batch, as PyTorch's torch.nn.SyncBatchNorm. The per-channel sums are all-reduced in
// forward by a differentiable all-reduce (its backward all-reduces the incoming gradients), so
// autograd gives each rank the gradient a single process would compute on the whole batch.
//
// C++ modules call their children through typed member holders, so a converter cannot swap a
// torch::nn::BatchNorm2d for another class behind its parent's back (PyTorch's
// convert_sync_batchnorm replaces Python attributes). Build models with ddp::SyncBatchNorm — with
// no process group it is exactly torch::nn::BatchNorm (same options, parameter and buffer names,
// same maths) — and call convert_sync_batchnorm(model, group) to synchronise them all.
#pragma once

#include <memory>

#include <torch/torch.h>

namespace ddp {

class ProcessGroup;

class SyncBatchNormImpl : public torch::nn::Module {
 public:
  explicit SyncBatchNormImpl(const torch::nn::BatchNormOptions& options);
  explicit SyncBatchNormImpl(int64_t num_features)
      : SyncBatchNormImpl(torch::nn::BatchNormOptions(num_features)) {}

  /// (N, C, ...) → the same shape. In training with a group of 2+ ranks the mean and variance
  /// are over all ranks' N x ... values of each channel (ranks may have different N).
  torch::Tensor forward(const torch::Tensor& input);

  /// The group to synchronise over; nullptr (the default): plain, local BatchNorm.
  void set_process_group(std::shared_ptr<ProcessGroup> group) { group_ = std::move(group); }
  bool synchronised() const;

  torch::nn::BatchNormOptions options;
  torch::Tensor weight, bias;                                    // parameters (affine)
  torch::Tensor running_mean, running_var, num_batches_tracked;  // buffers (track_running_stats)

 private:
  std::shared_ptr<ProcessGroup> group_;
};
TORCH_MODULE(SyncBatchNorm);

/// Sets `group` on every SyncBatchNorm in `module`'s tree and returns how many; throws
/// InvalidArgument naming the first torch::nn::BatchNorm1d/2d/3d found, which it cannot convert.
int convert_sync_batchnorm(torch::nn::Module& module, std::shared_ptr<ProcessGroup> group);

/// Sums `tensor` over the ranks of `group`, differentiably: the gradient of each rank's input
/// is the sum of every rank's output gradient.
torch::Tensor differentiable_all_reduce_sum(const torch::Tensor& tensor, ProcessGroup& group);

}  // namespace ddp
