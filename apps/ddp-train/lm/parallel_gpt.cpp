#include "lm/parallel_gpt.h"

#include <unordered_set>

namespace ddp::train {

ParallelGPT::ParallelGPT(models::GPT gpt, const TrainOptions& o,
                         std::shared_ptr<ProcessGroup> group)
    : gpt_(std::move(gpt)) {
  if (!group) return;
  if (o.parallel == ParallelKind::kFsdp) {
    FSDPOptions options;
    // bf16: the gathered weights and the computation in bf16, gradients reduced in fp32 (FSDP2's
    // usual policy); the shards and AdamW stay fp32.
    if (o.precision == Precision::kBf16) {
      options.mixed_precision(
          MixedPrecisionPolicy().param_dtype(torch::kBFloat16).reduce_dtype(torch::kFloat));
    }
    fsdp_.emplace(gpt_.ptr(), gpt_->blocks(), std::move(group), options);
  } else {
    ddp_.emplace(
        gpt_, std::move(group),
        DDPOptions().bucket_cap_mb(o.bucket_cap_mb).first_bucket_cap_mb(o.first_bucket_cap_mb));
  }
}

torch::Tensor ParallelGPT::forward(const torch::Tensor& tokens) {
  if (fsdp_) return fsdp_->forward(tokens);
  if (ddp_) return ddp_->forward(tokens);
  return gpt_->forward(tokens);
}

void ParallelGPT::set_gradient_sync(bool sync) {
  if (fsdp_) fsdp_->set_requires_gradient_sync(sync);
  if (!ddp_) return;
  if (sync) {
    no_sync_.reset();
  } else if (!no_sync_) {
    no_sync_.emplace(ddp_->reducer());
  }
}

double ParallelGPT::clip_grad_norm(double max_norm) {
  if (fsdp_) return fsdp_->clip_grad_norm_(max_norm);
  return torch::nn::utils::clip_grad_norm_(parameters(), max_norm);
}

std::vector<std::pair<std::string, torch::Tensor>> ParallelGPT::trained_parameters() const {
  if (fsdp_) return fsdp_->named_parameters();
  std::vector<std::pair<std::string, torch::Tensor>> out;
  std::unordered_set<const void*> seen;
  for (const auto& p : gpt_->named_parameters()) {
    if (seen.insert(p.value().unsafeGetTensorImpl()).second) out.emplace_back(p.key(), p.value());
  }
  return out;
}

std::vector<torch::Tensor> ParallelGPT::parameters() const {
  std::vector<torch::Tensor> out;
  for (auto& [name, p] : trained_parameters()) out.push_back(p);
  return out;
}

std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> ParallelGPT::decay_and_no_decay()
    const {
  const auto whole = gpt_->named_parameters();
  std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> split;
  for (const auto& [name, p] : trained_parameters()) {
    // A shard keeps its parameter's dimensions, but test the whole one's all the same.
    (whole[name].dim() >= 2 ? split.first : split.second).push_back(p);
  }
  return split;
}

std::map<std::string, torch::Tensor> ParallelGPT::full_state_dict() {
  std::map<std::string, torch::Tensor> out;
  if (fsdp_) {
    for (const auto& item : fsdp_->full_state_dict()) out[item.key()] = item.value();
    return out;
  }
  for (const auto& p : gpt_->named_parameters()) out[p.key()] = p.value().detach();
  for (const auto& b : gpt_->named_buffers()) out[b.key()] = b.value().detach();
  return out;
}

int64_t ParallelGPT::parameter_and_gradient_bytes() const {
  int64_t bytes = 0;
  for (const auto& [name, p] : trained_parameters()) {
    bytes += p.numel() * p.element_size();
    if (p.grad().defined()) bytes += p.grad().numel() * p.grad().element_size();
  }
  return bytes;
}

int64_t ParallelGPT::peak_unsharded_bytes() const {
  return fsdp_ ? fsdp_->memory().peak_unsharded_bytes : 0;
}

}  // namespace ddp::train
