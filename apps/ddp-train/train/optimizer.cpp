#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

namespace ddp::train {
namespace {

// SGD (the reference program's) or Adam, over the parameters it is given.
OptimizerFactory optimizer_factory(const TrainOptions& o) {
  return [o](std::vector<torch::Tensor> params) -> std::unique_ptr<torch::optim::Optimizer> {
    switch (o.optimizer) {
      case OptimizerKind::kAdam:
        return std::make_unique<torch::optim::Adam>(
            params, torch::optim::AdamOptions(o.lr).weight_decay(o.weight_decay));
      case OptimizerKind::kAdamW:
        return std::make_unique<torch::optim::AdamW>(
            params,
            torch::optim::AdamWOptions(o.lr).betas({0.9, o.beta2}).weight_decay(o.weight_decay));
      case OptimizerKind::kSgd:
        break;
    }
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
  };
}

void set_lr(torch::optim::Optimizer* optimizer, double lr) {
  if (optimizer == nullptr) return;  // an empty ZeRO shard
  for (auto& group : optimizer->param_groups()) group.options().set_lr(lr);
}

}  // namespace

double scheduled_lr(const TrainOptions& o, int64_t step, int64_t steps_per_epoch) {
  const double total = double(steps_per_epoch) * o.epochs;
  const double warmup = o.warmup_epochs * double(steps_per_epoch);
  const double s = double(step);
  if (s < warmup) return o.lr * (s + 1) / warmup;
  if (o.lr_schedule != LrSchedule::kCosine || total <= warmup) return o.lr;
  const double progress = std::min(1.0, (s - warmup) / (total - warmup));
  return o.lr * 0.5 * (1 + std::cos(M_PI * progress));
}

TrainOptimizer::TrainOptimizer(const TrainOptions& options, torch::nn::Module& model,
                               std::shared_ptr<ProcessGroup> group, int64_t steps_per_epoch)
    : options_(options),
      make_(optimizer_factory(options)),
      parameters_(model.parameters()),
      steps_per_epoch_(steps_per_epoch),
      lr_(options.lr) {
  if (options.zero && group) {
    zero_.emplace(parameters_, std::move(group), make_);
  } else {
    plain_ = make_(parameters_);
  }
  // PyTorch's defaults; DDP gives every rank the same gradients, so the same verdict on them.
  if (options.precision == Precision::kFp16) scaler_.emplace();
}

torch::Tensor TrainOptimizer::scaled(const torch::Tensor& loss) {
  return scaler_ ? scaler_->scale(loss) : loss;
}

bool TrainOptimizer::step(int64_t global_step) {
  lr_ = scheduled_lr(options_, global_step, steps_per_epoch_);
  if (zero_) {
    set_lr(zero_->local(), lr_);
    zero_->step();
    return true;
  }
  set_lr(plain_.get(), lr_);
  if (!scaler_) {
    plain_->step();
    return true;
  }
  const bool stepped = scaler_->step(*plain_);
  scaler_->update();
  return stepped;
}

void TrainOptimizer::zero_grad() {
  if (zero_) {
    zero_->zero_grad();
  } else {
    plain_->zero_grad();
  }
}

CheckpointState TrainOptimizer::load(const std::string& path, torch::nn::Module& model) {
  if (!zero_) return load_checkpoint(path, model, plain_.get());
  // Every rank reads the whole optimizer state and keeps its shard's.
  std::unique_ptr<torch::optim::Optimizer> full = make_(parameters_);
  CheckpointState state = load_checkpoint(path, model, full.get());
  zero_->load_from_full(*full);
  return state;
}

void TrainOptimizer::save(const std::string& path, const torch::nn::Module& model,
                          const CheckpointState& state, bool is_root) {
  // Sharded state is gathered on rank 0 first (a collective: every rank takes part).
  std::unique_ptr<torch::optim::Optimizer> consolidated = zero_ ? zero_->consolidate(0) : nullptr;
  if (is_root) save_checkpoint(path, model, zero_ ? *consolidated : *plain_, state);
}

void TrainOptimizer::save_async(AsyncCheckpointWriter& writer, const std::string& path,
                                const torch::nn::Module& model, const CheckpointState& state,
                                bool is_root) {
  std::unique_ptr<torch::optim::Optimizer> consolidated = zero_ ? zero_->consolidate(0) : nullptr;
  if (is_root) writer.write(path, model, zero_ ? *consolidated : *plain_, state);
}

int64_t TrainOptimizer::local_state_bytes() const {
  return zero_ ? zero_->local_state_bytes() : optimizer_state_bytes(*plain_);
}

}  // namespace ddp::train
