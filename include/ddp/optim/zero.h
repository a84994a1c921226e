// ZeRO stage 1, as PyTorch's ZeroRedundancyOptimizer: the optimizer state is sharded. Each rank
// owns a part of the parameters (greedy by size, the same partition everywhere), keeps optimizer
// state for those only and steps them with its own local optimizer; then every rank broadcasts
// the parameters it updated, so all ranks end the step with the same weights as an unsharded
// optimizer would give. Gradients are still averaged by DistributedDataParallel beforehand.
//
//   ddp::ZeroRedundancyOptimizer opt(model->parameters(), group, [](std::vector<torch::Tensor> p) {
//     return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(1e-3));
//   });
//   loss.backward(); opt.step();
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <torch/torch.h>

namespace ddp {

class ProcessGroup;

/// Builds the wrapped optimizer over a list of parameters (a shard, or all of them).
using OptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

class ZeroRedundancyOptimizer {
 public:
  /// Throws InvalidArgument when `params` is empty or mixes dtypes (one flat broadcast per rank).
  ZeroRedundancyOptimizer(std::vector<torch::Tensor> params, std::shared_ptr<ProcessGroup> group,
                          OptimizerFactory make_optimizer);
  ~ZeroRedundancyOptimizer();

  /// Steps this rank's shard, then brings every rank's updated shard to all ranks.
  void step();
  /// Clears every parameter's gradient (all of them, not only this rank's shard).
  void zero_grad();

  /// The rank that owns (keeps state for, and updates) parameter `index`.
  int owner_of(size_t index) const { return owner_[index]; }
  /// The optimizer over this rank's shard (nullptr when the shard is empty).
  torch::optim::Optimizer* local() { return local_.get(); }

  /// Collective: rank `root` gets an optimizer over all parameters holding every rank's state
  /// (for checkpoints); the other ranks get nullptr.
  std::unique_ptr<torch::optim::Optimizer> consolidate(int root = 0);
  /// Takes this rank's share of the state of `full`, an optimizer over all parameters (from a
  /// checkpoint); the rest of `full`'s state is not needed here.
  void load_from_full(torch::optim::Optimizer& full);

  /// Bytes of this rank's optimizer state, as serialised (what sharding saves is measured here).
  int64_t local_state_bytes() const;

 private:
  void broadcast_shards();

  std::vector<torch::Tensor> params_;
  std::shared_ptr<ProcessGroup> group_;
  OptimizerFactory make_optimizer_;
  std::vector<int> owner_;                   // parameter → rank
  std::vector<std::vector<size_t>> shards_;  // rank → its parameters, in parameter order
  std::unique_ptr<torch::optim::Optimizer> local_;
};

/// Serialised size of `optimizer`'s state in bytes.
int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer);

}  // namespace ddp
