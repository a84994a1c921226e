// Fully sharded data parallel, with the semantics of PyTorch's FSDP2 (fully_shard): every rank
// keeps 1/N of each parameter, of its gradient and of the optimizer's state. Before a sharded
// unit's forward its parameters are all-gathered; after its backward their gradients are
// reduce-scattered, so each rank ends backward with the averaged gradient of its own rows.
//
//   auto gpt = std::make_shared<GPTImpl>(config);
//   std::vector<std::shared_ptr<torch::nn::Module>> units(gpt->blocks.begin(), ...);
//   ddp::FullyShardedDataParallel<GPTImpl> model(gpt, units, group);
//   torch::optim::AdamW opt(model.parameters(), ...);   // this rank's shards
//   auto loss = ...(model.forward(x), y); loss.backward(); opt.step();
//
// - Units. Each module in `units` is one communication group (one all-gather before its
//   forward, one reduce-scatter after its backward); the root is a unit of the parameters no
//   other unit holds. List them bottom-up, as FSDP2 wants fully_shard applied. The root's
//   forward calls each unit through ddp::call (module_call.h): a LibTorch module has no forward
//   hooks of its own.
// - Sharding. Each parameter is cut on dim 0 as torch.chunk cuts it: ceil(rows / N) rows per
//   rank, the last ranks' chunks shorter or empty; the all-gather pads every chunk to the first
//   one's size.
// - The module's own parameter tensors are the unsharded ones: they hold their values only
//   while the unit is gathered (within forward and backward, and between unshard() and
//   reshard()); otherwise their storage is freed. Optimize parameters(), never the module's.
// - One thread, one forward then its backward, as DistributedDataParallel (ddp.h). The ranks'
//   forwards must call the same units in the same order.
// - A unit's parameters are used within its forward only. A weight tied to a module outside the
//   unit is refused (tie within one unit, e.g. the root); a tensor taken out of a unit and used
//   elsewhere is not seen, and its storage is freed under it.
// - Destroying the wrapper leaves the module's tensors without storage: take full_state_dict()
//   first to go on with an unsharded model.
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "ddp/fsdp/module_call.h"
#include "ddp/process_group.h"

namespace ddp {

/// FSDP2's MixedPrecisionPolicy: what the parameters are gathered and computed in, and what
/// gradients are reduced in. The shards, their gradients and the optimizer stay in the
/// parameters' own dtype (float32).
struct MixedPrecisionPolicy {
  /// The dtype of the gathered parameters, and of floating-point inputs to the root's forward
  /// (none: the parameters' own).
  TORCH_ARG(c10::optional<torch::ScalarType>, param_dtype) = c10::nullopt;
  /// The dtype of the reduce-scatter (none: param_dtype). In float16, gradients are divided by
  /// the number of ranks before the sum, so that it cannot overflow where the average would not.
  TORCH_ARG(c10::optional<torch::ScalarType>, reduce_dtype) = c10::nullopt;
};

struct FSDPOptions {
  /// Free each unit's gathered parameters after its forward and gather them again for its
  /// backward (the root's stay gathered until the end of backward, as in FSDP2).
  TORCH_ARG(bool, reshard_after_forward) = true;
  /// Start the next unit's all-gather while this one computes, in forward (the order of the
  /// previous iteration) and in backward.
  TORCH_ARG(bool, prefetch) = true;
  TORCH_ARG(MixedPrecisionPolicy, mixed_precision) = {};
  /// As DDPOptions': a parameter that gets no gradient on a rank counts as zero there, and one
  /// that gets none on any rank keeps its gradient as it was. Off: a parameter without a
  /// gradient is an error, named at the end of that backward.
  TORCH_ARG(bool, find_unused_parameters) = false;
};

/// Bytes this rank holds for the model, now and at most since construction (or reset_peak()).
struct FSDPMemory {
  int64_t sharded_parameter_bytes = 0;  ///< this rank's shards
  int64_t sharded_gradient_bytes = 0;   ///< their gradients
  int64_t unsharded_bytes = 0;          ///< gathered parameters and their full gradients, now
  int64_t peak_unsharded_bytes = 0;     ///< the most of those held at once
};

namespace fsdp {
class ShardedUnit;
}

/// The state behind FullyShardedDataParallel: the units, their shards and hooks. Not copyable;
/// FullyShardedDataParallel forwards to it.
class FSDPState {
 public:
  FSDPState(std::shared_ptr<torch::nn::Module> root,
            const std::vector<std::shared_ptr<torch::nn::Module>>& units,
            std::shared_ptr<ProcessGroup> group, FSDPOptions options);
  ~FSDPState();
  FSDPState(const FSDPState&) = delete;
  FSDPState& operator=(const FSDPState&) = delete;

  /// This rank's shards, in the module's parameter order (tied parameters once).
  std::vector<torch::Tensor> parameters() const;
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters() const;

  /// Off: backward keeps accumulating the full gradients locally, without communication, until
  /// a backward with it on reduce-scatters the sum (gradient accumulation; DDP's no_sync()).
  void set_requires_gradient_sync(bool sync);
  bool requires_gradient_sync() const;

  /// Scales the shards' gradients so that the norm over all of them, on every rank, is at most
  /// `max_norm` (torch::nn::utils::clip_grad_norm_ over the unsharded model). Returns the total
  /// norm before clipping. Collective.
  double clip_grad_norm_(double max_norm);

  /// Gathers every unit (collective), so that the module's parameters hold their values.
  void unshard();
  /// Frees every unit's gathered parameters (after unshard()).
  void reshard();

  /// The whole model as a state dict, named as the module names it (tied parameters under each
  /// name), in the parameters' own dtype, on every rank. Collective.
  torch::OrderedDict<std::string, torch::Tensor> full_state_dict();
  /// Takes this rank's rows of every parameter of `state` (a full_state_dict(), or the module's
  /// state dict of an unsharded model) into the shards, and its buffers into the module's.
  /// Throws InvalidArgument naming a missing or misshapen entry.
  void load_full_state_dict(const torch::OrderedDict<std::string, torch::Tensor>& state);

  FSDPMemory memory() const;
  void reset_peak_memory();

  /// Each unit's name and its parameters' names (root last), for logs and tests.
  std::vector<std::pair<std::string, std::vector<std::string>>> unit_parameter_names() const;
  const FSDPOptions& options() const { return options_; }
  ProcessGroup& group() { return *group_; }

 private:
  struct Iteration;
  void before_forward(size_t unit);
  void after_forward(size_t unit, const std::vector<torch::Tensor>& outputs);
  /// The first hook of a backward: fixes the reduce-scatters' order, queues end_of_backward().
  void begin_backward();
  void before_backward(size_t unit);
  void on_gradient();
  /// Reduce-scatters the next units in order while all their gradients are in.
  void reduce_ready();
  void reduce_next();
  void end_of_backward();
  void note_memory();

  std::shared_ptr<torch::nn::Module> root_;
  std::shared_ptr<ProcessGroup> group_;
  FSDPOptions options_;
  std::vector<std::unique_ptr<fsdp::ShardedUnit>> units_;  // as given, the root last
  std::vector<ForwardHooksHandle> hook_handles_;
  std::unique_ptr<Iteration> iteration_;
  std::shared_ptr<bool> alive_;  // hooks on tensors may outlive this object
  std::vector<size_t> last_forward_order_;
  std::vector<std::pair<std::string, torch::Tensor>> named_shards_;  // named_parameters()
  bool sync_gradients_ = true;
  FSDPMemory memory_;  // its peak
};

/// Wraps a module of type `ModuleType` (a torch::nn::Module with forward()).
template <typename ModuleType>
class FullyShardedDataParallel {
 public:
  /// Checks that every rank holds the same model, copies rank 0's parameters and buffers to
  /// every rank, then shards each unit of `units` (submodules of `module`, bottom-up) and the
  /// root. Throws InvalidArgument for a unit outside the module or listed twice.
  FullyShardedDataParallel(std::shared_ptr<ModuleType> module,
                           std::vector<std::shared_ptr<torch::nn::Module>> units,
                           std::shared_ptr<ProcessGroup> group, FSDPOptions options = {})
      : module_(std::move(module)), state_(module_, units, std::move(group), options) {}

  /// Runs the module's forward (gathering each unit as it is reached; floating-point tensor
  /// arguments are cast to the mixed-precision param_dtype).
  template <typename... Args>
  auto forward(Args&&... args) {
    const auto dtype = state_.options().mixed_precision().param_dtype();
    return ddp::call(*module_, cast_input(std::forward<Args>(args), dtype)...);
  }
  template <typename... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }

  std::vector<torch::Tensor> parameters() const { return state_.parameters(); }
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters() const {
    return state_.named_parameters();
  }
  void set_requires_gradient_sync(bool sync) { state_.set_requires_gradient_sync(sync); }
  double clip_grad_norm_(double max_norm) { return state_.clip_grad_norm_(max_norm); }
  void unshard() { state_.unshard(); }
  void reshard() { state_.reshard(); }
  torch::OrderedDict<std::string, torch::Tensor> full_state_dict() {
    return state_.full_state_dict();
  }
  void load_full_state_dict(const torch::OrderedDict<std::string, torch::Tensor>& state) {
    state_.load_full_state_dict(state);
  }
  FSDPMemory memory() const { return state_.memory(); }
  void reset_peak_memory() { state_.reset_peak_memory(); }

  const std::shared_ptr<ModuleType>& module() const { return module_; }
  ModuleType* operator->() const { return module_.get(); }
  void train(bool on = true) { module_->train(on); }
  void eval() { module_->eval(); }
  FSDPState& state() { return state_; }

 private:
  template <typename T>
  static decltype(auto) cast_input(T&& value, c10::optional<torch::ScalarType> dtype) {
    if constexpr (std::is_same_v<std::decay_t<T>, torch::Tensor>) {
      return dtype && value.is_floating_point() ? value.to(*dtype) : torch::Tensor(value);
    } else {
      return std::forward<T>(value);
    }
  }

  std::shared_ptr<ModuleType> module_;
  FSDPState state_;
};

}  // namespace ddp
