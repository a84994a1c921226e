#include "ddp/sync_batchnorm.h"

#include <c10/util/StringUtil.h>

#include "ddp/error.h"
#include "ddp/process_group.h"

namespace ddp {
namespace {

struct AllReduceSum : torch::autograd::Function<AllReduceSum> {
  // The group travels as its address: saved_data holds IValues only. The module that owns the
  // group outlives the graphs its forward builds in every normal use.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               int64_t group_address) {
    ctx->saved_data["group"] = group_address;
    torch::Tensor out = input.clone();
    reinterpret_cast<ProcessGroup*>(group_address)->allreduce(out).wait();
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* group = reinterpret_cast<ProcessGroup*>(ctx->saved_data["group"].toInt());
    torch::Tensor grad = grads[0].contiguous().clone();
    group->allreduce(grad).wait();
    return {grad, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor differentiable_all_reduce_sum(const torch::Tensor& tensor, ProcessGroup& group) {
  return AllReduceSum::apply(tensor, int64_t(reinterpret_cast<intptr_t>(&group)));
}

SyncBatchNormImpl::SyncBatchNormImpl(const torch::nn::BatchNormOptions& options_)
    : options(options_) {
  const int64_t c = options.num_features();
  if (c < 1) throw InvalidArgument(c10::str("SyncBatchNorm: num_features must be >= 1, got ", c));
  if (options.affine()) {
    weight = register_parameter("weight", torch::ones({c}));
    bias = register_parameter("bias", torch::zeros({c}));
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", torch::zeros({c}));
    running_var = register_buffer("running_var", torch::ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
  }
}

bool SyncBatchNormImpl::synchronised() const { return group_ && group_->size() > 1; }

torch::Tensor SyncBatchNormImpl::forward(const torch::Tensor& input) {
  if (input.dim() < 2 || input.size(1) != options.num_features()) {
    throw InvalidArgument(c10::str("SyncBatchNorm: expected input of shape (N, ",
                                   options.num_features(), ", ...), got ", input.sizes()));
  }
  const bool training = is_training() || !options.track_running_stats();
  double momentum = options.momentum().value_or(0.0);
  if (is_training() && options.track_running_stats()) {
    num_batches_tracked.add_(1);
    // No momentum: a cumulative moving average, as torch::nn::BatchNorm.
    if (!options.momentum()) momentum = 1.0 / double(num_batches_tracked.item<int64_t>());
  }
  if (!training || !synchronised()) {
    return torch::batch_norm(input, weight, bias, running_mean, running_var, training, momentum,
                             options.eps(), /*cudnn_enabled=*/true);
  }

  // Per channel: this rank's count n, n * mean and n * E[x²] (from a Welford mean and variance in
  // the input's precision), summed over ranks in double, give the global mean and variance.
  std::vector<int64_t> reduce_dims = {0};
  for (int64_t d = 2; d < input.dim(); ++d) reduce_dims.push_back(d);
  const int64_t c = options.num_features();
  const double n_local = double(input.numel() / c);
  auto [local_var, local_mean] = torch::var_mean(input, reduce_dims, /*unbiased=*/false);
  local_var = local_var.to(torch::kDouble);
  local_mean = local_mean.to(torch::kDouble);
  const torch::Tensor local =
      torch::cat({local_mean * n_local, (local_var + local_mean * local_mean) * n_local,
                  torch::full({1}, n_local, local_mean.options())});
  const torch::Tensor global = differentiable_all_reduce_sum(local, *group_);
  const torch::Tensor count = global.narrow(0, 2 * c, 1);
  const torch::Tensor mean = global.narrow(0, 0, c) / count;
  const torch::Tensor var = (global.narrow(0, c, c) / count - mean * mean).clamp_min(0);  // biased
  if (options.track_running_stats()) {
    torch::NoGradGuard no_grad;
    const double n = count.item<double>();
    const torch::Tensor unbiased = var * (n / std::max(n - 1.0, 1.0));
    running_mean.mul_(1 - momentum).add_(mean.to(running_mean.scalar_type()), momentum);
    running_var.mul_(1 - momentum).add_(unbiased.to(running_var.scalar_type()), momentum);
  }
  // y = x * a + b' per channel, with a = weight / sqrt(var + eps) and b' = bias - mean * a: two
  // passes over the activations instead of four.
  std::vector<int64_t> shape(size_t(input.dim()), 1);
  shape[1] = c;
  torch::Tensor a = torch::rsqrt(var + options.eps());
  torch::Tensor shift = -mean * a;
  if (options.affine()) {
    a = a * weight.to(torch::kDouble);
    shift = shift * weight.to(torch::kDouble) + bias.to(torch::kDouble);
  }
  return input * a.to(input.scalar_type()).view(shape) + shift.to(input.scalar_type()).view(shape);
}

int convert_sync_batchnorm(torch::nn::Module& module, std::shared_ptr<ProcessGroup> group) {
  int converted = 0;
  for (const auto& item : module.named_modules("", /*include_self=*/true)) {
    torch::nn::Module& m = *item.value();
    if (auto* sync = dynamic_cast<SyncBatchNormImpl*>(&m)) {
      sync->set_process_group(group);
      ++converted;
    } else if (dynamic_cast<torch::nn::BatchNorm1dImpl*>(&m) ||
               dynamic_cast<torch::nn::BatchNorm2dImpl*>(&m) ||
               dynamic_cast<torch::nn::BatchNorm3dImpl*>(&m)) {
      throw InvalidArgument(c10::str(
          "convert_sync_batchnorm: '", item.key().empty() ? m.name() : item.key(), "' is a ",
          m.name(),
          ", which a C++ parent calls through its own typed member and so cannot be swapped; "
          "build the model with ddp::SyncBatchNorm (a drop-in with the same options and names)"));
    }
  }
  return converted;
}

}  // namespace ddp
