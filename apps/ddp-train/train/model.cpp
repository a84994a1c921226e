#include "train/model.h"

#include <chrono>
#include <cstdio>

#include "ddp/algorithms/comm_hook_registry.h"

namespace ddp::train {

LockstepBaseline::LockstepBaseline(std::shared_ptr<ProcessGroup> group)
    : group_(std::move(group)), token_(torch::zeros({1})) {
  group_->allreduce(token_).wait();
}

double LockstepBaseline::wait() {
  const auto start = std::chrono::steady_clock::now();
  group_->allreduce(token_).wait();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TrainedModel::TrainedModel(const TrainOptions& o, const TrainingSetup& s)
    : module_(s.model), device_(s.device), precision_(s.precision) {
  if (!s.group) return;
  if (s.newcomer) return;  // wrapped by its Recovery::begin(), once it holds the state
  if (!o.no_sync_baseline) {
    regroup(o, s);
    return;
  }
  if (s.is_root()) {
    std::printf("%s: gradients are NOT averaged; for measuring DDP's overhead only\n",
                o.lockstep_baseline ? "--lockstep-baseline" : "--no-sync-baseline");
  }
  if (o.lockstep_baseline) lockstep_.emplace(s.group);
}

void TrainedModel::regroup(const TrainOptions& o, const TrainingSetup& s) {
  ddp_.reset();  // its reducer's hooks go with it
  ddp_.emplace(
      module_, s.group,
      DDPOptions().bucket_cap_mb(o.bucket_cap_mb).first_bucket_cap_mb(o.first_bucket_cap_mb));
  ddp_->register_comm_hook(make_comm_hook(o.comm_hook));
}

torch::Tensor TrainedModel::forward(const torch::Tensor& images) {
  return fp32_logits(device_, precision_,
                     [&] { return ddp_ ? ddp_->forward(images) : module_->forward(images); });
}

double TrainedModel::exposed_wait_seconds() {
  if (ddp_) return ddp_->stats().last_exposed_comm_seconds;
  return lockstep_ ? lockstep_->wait() : 0.0;
}

std::unique_ptr<Join> TrainedModel::join_when_out_of_data(bool no_pad,
                                                          std::function<void()> shadow_step) {
  if (!ddp_ || !no_pad) return nullptr;
  return std::make_unique<Join>(*ddp_, std::move(shadow_step));
}

int64_t TrainedModel::bytes_communicated_per_step() const {
  return ddp_ ? ddp_->stats().bytes_communicated_per_iteration : 0;
}

}  // namespace ddp::train
