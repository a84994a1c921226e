// DistributedDataParallel for any torch::nn::Module: the same model on every rank, gradients
// averaged by all-reduce while backward is still running. Wrap the module, call forward through
// the wrapper, then loss.backward() and optimizer.step() as usual — nothing else to call.
//
//   auto group = ddp::ProcessGroup::init({});
//   ddp::DistributedDataParallel model(Net(), group);
//   auto loss = torch::nn::functional::cross_entropy(model.forward(x), y);
//   loss.backward();  // gradients are averaged over ranks when this returns
//
// Threads: drive each DistributedDataParallel from one thread, one iteration (forward(), then
// the backward of its output) after the other. The reducer's bucket state has no lock: autograd
// runs the gradient hooks and the end-of-backward callback one at a time on the thread running
// the backward (the caller's on the CPU; on CUDA the device's engine thread, which is why the
// parameters must all be on one device). Two backward passes through one model at once, or a
// forward on another thread during a backward, race on that state: gradients count towards the
// wrong iteration, buckets are reduced twice or out of order, this rank's collectives stop
// matching the other ranks' and the job hangs until the process group's timeout (with
// debug_collectives, a mismatch of shapes fails at once). Likewise, another thread's collective
// on the same process group during backward may be ordered differently on each rank. Separate
// instances on separate process groups may each have their own thread (the tests' ranks do).
#pragma once

#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "ddp/algorithms/comm_hook.h"
#include "ddp/fsdp/module_call.h"
#include "ddp/process_group.h"
#include "ddp/reducer.h"

namespace ddp {

/// RAII guard of DistributedDataParallel::no_sync(): backward inside accumulates gradients
/// locally; the first backward after it communicates the accumulated sum.
class NoSyncGuard {
 public:
  explicit NoSyncGuard(Reducer& reducer) : reducer_(reducer), previous_(reducer.sync_) {
    reducer_.sync_ = false;
  }
  ~NoSyncGuard() { reducer_.sync_ = previous_; }
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;

 private:
  Reducer& reducer_;
  bool previous_;
};

/// Wraps a module of type `ModuleType` (a torch::nn::Module subclass with forward()). One thread
/// at a time (see the top of this file).
template <typename ModuleType>
class DistributedDataParallel {
 public:
  /// Checks the module against every rank's, copies rank 0's parameters and buffers, buckets
  /// the gradients and installs the hooks (see Reducer).
  DistributedDataParallel(std::shared_ptr<ModuleType> module, std::shared_ptr<ProcessGroup> group,
                          DDPOptions options = {})
      : module_(std::move(module)), reducer_(module_, std::move(group), options) {}

  /// The same, from a module holder (`Net net; DistributedDataParallel ddp(net, group);`).
  DistributedDataParallel(torch::nn::ModuleHolder<ModuleType> module,
                          std::shared_ptr<ProcessGroup> group, DDPOptions options = {})
      : DistributedDataParallel(module.ptr(), std::move(group), options) {}

  /// Runs the module's forward, prepared for a synchronised backward (on this thread: see the
  /// top of this file).
  template <typename... Args>
  auto forward(Args&&... args) {
    reducer_.before_forward();
    auto output = module_->forward(std::forward<Args>(args)...);
    std::vector<torch::Tensor> tensors;
    detail::collect_tensors(output, tensors);
    reducer_.after_forward(tensors);
    return output;
  }

  template <typename... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }

  /// Backward passes inside the returned guard's lifetime do not communicate.
  NoSyncGuard no_sync() { return NoSyncGuard(reducer_); }

  /// The wrapped module (evaluate with it directly to skip the buffer broadcast).
  const std::shared_ptr<ModuleType>& module() const { return module_; }
  ModuleType* operator->() const { return module_.get(); }
  std::vector<torch::Tensor> parameters() const { return module_->parameters(); }
  void train(bool on = true) { module_->train(on); }
  void eval() { module_->eval(); }

  /// Replaces the default all-reduce (before the first backward).
  void register_comm_hook(std::unique_ptr<CommHook> hook) {
    reducer_.set_comm_hook(std::move(hook));
  }

  /// The reducer: its buckets (bucket_parameter_names()), and what ddp::Join takes.
  Reducer& reducer() { return reducer_; }
  const ReducerStats& stats() const { return reducer_.stats(); }

 private:
  std::shared_ptr<ModuleType> module_;
  Reducer reducer_;
};

template <typename M>
DistributedDataParallel(torch::nn::ModuleHolder<M>, std::shared_ptr<ProcessGroup>)
    -> DistributedDataParallel<M>;
template <typename M>
DistributedDataParallel(torch::nn::ModuleHolder<M>, std::shared_ptr<ProcessGroup>, DDPOptions)
    -> DistributedDataParallel<M>;

}  // namespace ddp
