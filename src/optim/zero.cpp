#include "ddp/optim/zero.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <sstream>

#include <c10/util/StringUtil.h>

#include "ddp/error.h"
#include "ddp/process_group.h"
#include "torch_compat.h"

namespace ddp {
namespace {

std::string serialize(const torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void deserialize(torch::optim::Optimizer& optimizer, const std::string& bytes) {
  std::istringstream in(bytes);
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  optimizer.load(archive);
}

// Copies the state of `from` for `params` into `to` (both keyed by the same tensors).
void copy_states(torch::optim::Optimizer& from, torch::optim::Optimizer& to,
                 const std::vector<torch::Tensor>& params) {
  for (const auto& p : params) {
    const auto key = compat::optimizer_state_key(p);
    auto it = from.state().find(key);
    if (it != from.state().end()) to.state()[key] = it->second->clone();
  }
}

}  // namespace

int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer) {
  return int64_t(serialize(optimizer).size());
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<torch::Tensor> params,
                                                 std::shared_ptr<ProcessGroup> group,
                                                 OptimizerFactory make_optimizer)
    : params_(std::move(params)), group_(std::move(group)), make_optimizer_(make_optimizer) {
  if (!group_) throw InvalidArgument("ZeroRedundancyOptimizer: the process group is null");
  if (params_.empty()) throw InvalidArgument("ZeroRedundancyOptimizer: no parameters");
  for (const auto& p : params_) {
    if (p.scalar_type() != params_[0].scalar_type()) {
      throw InvalidArgument(c10::str("ZeroRedundancyOptimizer: parameters mix ",
                                     c10::toString(params_[0].scalar_type()), " and ",
                                     c10::toString(p.scalar_type()),
                                     "; give it one dtype's parameters per instance"));
    }
  }
  // Largest first, each to the rank with the fewest elements so far: balanced shards, and the
  // same partition on every rank because it depends only on the shapes.
  const int world = group_->size();
  std::vector<size_t> by_size(params_.size());
  std::iota(by_size.begin(), by_size.end(), size_t(0));
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](size_t a, size_t b) { return params_[a].numel() > params_[b].numel(); });
  std::vector<int64_t> load(size_t(world), 0);
  owner_.assign(params_.size(), 0);
  for (size_t i : by_size) {
    const int r = int(std::min_element(load.begin(), load.end()) - load.begin());
    owner_[i] = r;
    load[size_t(r)] += params_[i].numel();
  }
  shards_.assign(size_t(world), {});
  for (size_t i = 0; i < params_.size(); ++i) shards_[size_t(owner_[i])].push_back(i);
  std::vector<torch::Tensor> mine;
  for (size_t i : shards_[size_t(group_->rank())]) mine.push_back(params_[i]);
  if (!mine.empty()) local_ = make_optimizer_(mine);
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() = default;

void ZeroRedundancyOptimizer::zero_grad() {
  for (auto& p : params_) {
    if (p.grad().defined()) {
      p.mutable_grad().detach_();
      p.mutable_grad().zero_();
    }
  }
}

void ZeroRedundancyOptimizer::step() {
  if (local_) local_->step();
  broadcast_shards();
}

void ZeroRedundancyOptimizer::broadcast_shards() {
  torch::NoGradGuard no_grad;
  const int me = group_->rank();
  std::vector<torch::Tensor> flats(shards_.size());
  std::vector<Work> works;
  for (size_t r = 0; r < shards_.size(); ++r) {
    if (shards_[r].empty()) continue;
    if (int(r) == me) {
      std::vector<torch::Tensor> parts;
      for (size_t i : shards_[r]) parts.push_back(params_[i].detach().reshape({-1}));
      flats[r] = torch::cat(parts);
    } else {
      int64_t numel = 0;
      for (size_t i : shards_[r]) numel += params_[i].numel();
      flats[r] = torch::empty({numel}, params_[0].options());
    }
    works.push_back(group_->broadcast(flats[r], int(r)));
  }
  for (auto& w : works) w.wait();
  for (size_t r = 0; r < shards_.size(); ++r) {
    if (int(r) == me || shards_[r].empty()) continue;
    int64_t offset = 0;
    for (size_t i : shards_[r]) {
      torch::Tensor& p = params_[i];
      p.copy_(flats[r].narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
  }
}

std::unique_ptr<torch::optim::Optimizer> ZeroRedundancyOptimizer::consolidate(int root) {
  const int me = group_->rank();
  std::unique_ptr<torch::optim::Optimizer> full;
  if (me == root) full = make_optimizer_(params_);
  for (size_t r = 0; r < shards_.size(); ++r) {
    if (shards_[r].empty()) continue;
    std::vector<torch::Tensor> shard;
    for (size_t i : shards_[r]) shard.push_back(params_[i]);
    if (int(r) == root) {
      if (me == root) copy_states(*local_, *full, shard);
      continue;
    }
    // Rank r's serialised state, to the root (everyone takes part in the broadcasts).
    const std::string bytes = int(r) == me ? serialize(*local_) : std::string();
    torch::Tensor size = torch::full({1}, int64_t(bytes.size()), torch::kLong);
    group_->broadcast(size, int(r)).wait();
    torch::Tensor payload = torch::empty({size.item<int64_t>()}, torch::kUInt8);
    if (int(r) == me) std::memcpy(payload.data_ptr(), bytes.data(), bytes.size());
    group_->broadcast(payload, int(r)).wait();
    if (me == root) {
      auto received = make_optimizer_(shard);  // over the root's own tensors of r's shard
      deserialize(*received, std::string(static_cast<const char*>(payload.data_ptr()),
                                         size_t(payload.numel())));
      copy_states(*received, *full, shard);
    }
  }
  return full;
}

void ZeroRedundancyOptimizer::load_from_full(torch::optim::Optimizer& full) {
  if (!local_) return;
  std::vector<torch::Tensor> mine;
  for (size_t i : shards_[size_t(group_->rank())]) mine.push_back(params_[i]);
  copy_states(full, *local_, mine);
}

int64_t ZeroRedundancyOptimizer::local_state_bytes() const {
  return local_ ? optimizer_state_bytes(*local_) : 0;
}

}  // namespace ddp
